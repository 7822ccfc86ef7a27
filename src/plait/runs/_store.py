"""The statements on plait's run tables: one function per question or change, on a connection.

Values (input, output, context, metadata, errors, events) are stored as JSON bytes (orjson),
as checkpoints are: JSON data only, nothing is pickled, and reading a run never runs code.
Changes that other processes wait for (a run that ended, new events, a stop request) are
announced with NOTIFY (on :data:`CHANNEL`, stops on :data:`STOP_CHANNEL`), so waiters wake at
once instead of polling. The statements that change runs do not notify themselves: a
transaction that notifies holds a lock every other notifying transaction of the server waits
for until it has committed, its WAL flush included, so notifying runs' ends would make them
commit one at a time. A worker's notifications go after the change, coalesced, in statements
that wait for no flush (see :mod:`plait.runs._notify`); a client's few (submit, cancel) go in
the transaction of their change.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from plait.runs._db import ident
from plait.runs.records import ACTIVE, Run, Schedule
from plait.tracing.carrier import parse_stamp

__all__ = [
    "CHANNEL",
    "STOP_CHANNEL",
    "RUN_COLUMNS",
    "active_runs",
    "add_events",
    "claimed_row",
    "decode",
    "encode",
    "finish",
    "finish_job",
    "get_run",
    "list_runs",
    "notify",
    "read_events",
    "row_run",
    "start_rider",
]

CHANNEL = "plait_runs"
"""The NOTIFY channel of waiters: payloads ``end:<run_id>`` and ``event:<run_id>``."""
STOP_CHANNEL = "plait_run_stops"
"""The NOTIFY channel of workers: payloads ``stop:<run_id>`` (workers need not wake for every
run's end)."""

RUN_COLUMNS = (
    "run_id, graph, ns, thread_id, status, multitask, input, resume, has_resume, context, metadata, priority, "
    "queue, timeout, job_id, attempts, worker, output, error, start_checkpoint, started, stop, rollback_of, "
    "schedule_id, tick, created_at, started_at, finished_at, updated_at, seq, stream, options, span"
)


def encode(value: Any) -> bytes | None:
    return None if value is None else orjson.dumps(value)


def decode(blob: Any) -> Any:
    return None if blob is None else orjson.loads(bytes(blob))


def row_run(row: Sequence[Any]) -> Run:
    """A :class:`Run` from a row of :data:`RUN_COLUMNS`."""
    return Run(
        run_id=row[0],
        graph=row[1],
        namespace=row[2],
        thread_id=row[3],
        status=row[4],
        multitask=row[5],
        input=decode(row[6]),
        resume=decode(row[7]),
        has_resume=row[8],
        context=decode(row[9]),
        metadata=decode(row[10]),
        priority=row[11],
        queue=row[12],
        timeout=row[13],
        attempts=row[15],
        worker=row[16],
        output=decode(row[17]),
        error=decode(row[18]),
        start_checkpoint=row[19],
        schedule_id=row[23],
        tick=row[24],
        created_at=row[25],
        started_at=row[26],
        finished_at=row[27],
        updated_at=row[28],
        options=decode(row[31]),
        trace=parse_stamp(row[32]),
    )


async def notify(cur: Any, kind: str, run_id: str) -> None:
    """Announce ``kind:run_id`` within the caller's transaction."""
    await cur.execute("SELECT pg_notify(%s, %s)", (STOP_CHANNEL if kind == "stop" else CHANNEL, f"{kind}:{run_id}"))


async def get_run(cur: Any, run_id: str) -> tuple[Run, dict[str, Any]] | None:
    """The run and its worker-side fields (``job_id``, ``started``, ``stop``, ``rollback_of``)."""
    await cur.execute(f"SELECT {RUN_COLUMNS} FROM plait_run WHERE run_id = %s", (run_id,))
    row = await cur.fetchone()
    return None if row is None else _with_extra(row)


CLAIM_EVENTS = (
    "CASE WHEN r.stream IS NULL THEN 0 ELSE "
    "(SELECT coalesce(max(e.seq), 0) FROM plait_run_event e WHERE e.run_id = r.run_id) END"
)
"""How many stream items earlier attempts of a claimed run ``r`` stored."""
_CLAIMABLE = (
    "r.status IN ('pending', 'running') AND r.stop IS NULL "
    "AND (r.started OR coalesce(cardinality(r.rollback_of), 0) = 0)"
)
CLAIM_FROM_JOB = (
    "UPDATE plait_run r SET status = 'running', attempts = r.attempts + 1, "
    "worker = %(worker)s::text || '/job-' || j.id, started_at = coalesce(r.started_at, %(now)s), "
    "updated_at = %(now)s FROM j WHERE j.task_name = %(task)s AND r.run_id = j.args ->> 'run_id' "
    f"AND j.lock = 'plait-thread:' || r.ns || '/' || r.thread_id AND {_CLAIMABLE} AND r.graph = ANY(%(graphs)s)"
)
"""Mark the run of job ``j`` (Procrastinate's row) running for an attempt by
``<worker>/job-<id>``, when it is on the thread of the job's lock, active, asked to stop by no
one, rolls nothing back and is of one of ``graphs``; where it starts from is recorded later,
under the thread's lease (:func:`record_start`)."""


def claimed_row(row: Sequence[Any]) -> tuple[Run, dict[str, Any]]:
    """A claimed run from a row of :data:`RUN_COLUMNS` and its stream items' count."""
    run, extra = _with_extra(row)
    extra["events"] = row[33]
    return run, extra


async def record_start(cur: Any, run_id: str, head: str | None) -> None:
    """Record the thread's head as a run's first attempt found it under the lease, before its
    input is written: a later attempt that finds the head moved past it knows the input landed."""
    await cur.execute(
        "UPDATE plait_run SET start_checkpoint = %s, started = true WHERE run_id = %s AND NOT started",
        (head, run_id),
    )


def start_rider(schema: str | None, run_id: str) -> tuple[str, list[Any]]:
    """:func:`record_start`'s change as a rider of the lease's statement, which reads the head
    (``l``: see :mod:`plait.checkpoint.postgres._riders`); its table named with its schema, as
    the checkpointer's connections may have another search path."""
    table = "plait_run" if schema is None else f"{ident(schema)}.plait_run"
    return (
        f"UPDATE {table} SET start_checkpoint = (SELECT id FROM l LIMIT 1), started = true "
        "WHERE run_id = %s AND NOT started",
        [run_id],
    )


async def record_span(cur: Any, run_id: str, span: str) -> None:
    """Record the ``plait.run`` span of a traced attempt as it starts (``<trace id>-<span id>``):
    the next attempt's span links to it."""
    await cur.execute("UPDATE plait_run SET span = %s WHERE run_id = %s", (span, run_id))


def _with_extra(row: Sequence[Any]) -> tuple[Run, dict[str, Any]]:
    return row_run(row), {
        "job_id": row[14],
        "started": row[20],
        "stop": row[21],
        "rollback_of": row[22] or [],
        "stream": row[30] or [],
        "span": row[32],
    }


async def active_runs(cur: Any, namespace: str, thread_id: str) -> list[tuple[str, str, int | None, str | None]]:
    """``(run_id, status, job_id, start_checkpoint)`` of the thread's pending and running runs, oldest first."""
    await cur.execute(
        "SELECT run_id, status, job_id, start_checkpoint FROM plait_run "
        "WHERE ns = %s AND thread_id = %s AND status = ANY(%s) ORDER BY seq",
        (namespace, thread_id, list(ACTIVE)),
    )
    return [(r[0], r[1], r[2], r[3]) for r in await cur.fetchall()]


async def list_runs(
    cur: Any,
    *,
    thread_id: str | None,
    namespace: str | None,
    status: str | None,
    graph: str | None,
    limit: int | None,
    before: str | None,
) -> list[Run]:
    where: list[str] = ["true"]
    params: list[Any] = []
    for column, value in (("thread_id", thread_id), ("ns", namespace), ("status", status), ("graph", graph)):
        if value is not None:
            where.append(f"{column} = %s")
            params.append(value)
    if before is not None:
        where.append("seq < (SELECT seq FROM plait_run WHERE run_id = %s)")
        params.append(before)
    sql = f"SELECT {RUN_COLUMNS} FROM plait_run WHERE {' AND '.join(where)} ORDER BY seq DESC"
    if limit is not None:
        sql += " LIMIT %s"
        params.append(limit)
    await cur.execute(sql, params)
    return [row_run(r) for r in await cur.fetchall()]


_ADD_EVENTS = (
    "added AS (INSERT INTO plait_run_event (run_id, seq, event) "
    "SELECT %s, %s + t.n - 1, t.event FROM unnest(%s::bytea[]) WITH ORDINALITY AS t (event, n) "
    "ON CONFLICT DO NOTHING)"
)
_FINISH = (
    "ended AS (UPDATE plait_run SET status = %s, output = coalesce(%s, output), error = %s, finished_at = %s, "
    "updated_at = %s WHERE run_id = %s AND status = ANY(%s) RETURNING run_id)"
)


async def finish(
    cur: Any,
    run_id: str,
    status: str,
    *,
    output: Any = None,
    error: Any = None,
    only_if: Sequence[str] = ACTIVE,
    events: tuple[int, Sequence[Any]] | None = None,
) -> bool:
    """End a run (only from one of ``only_if``), storing with it the stream items ``events``
    (the first one's number, the items) if given, by one statement (one round trip, all or
    nothing on an autocommit connection too). Not announced (see the module docstring).
    False when it had ended already (the items are stored all the same)."""
    ended, _ = await finish_job(cur, run_id, status, None, output=output, error=error, only_if=only_if, events=events)
    return ended


_GONE = "gone AS (DELETE FROM procrastinate_jobs WHERE id = %s AND status IN ('todo', 'doing') RETURNING id)"
"""What Procrastinate's ``procrastinate_finish_job_v1`` does to a job that succeeded when its
worker deletes those (``delete_jobs="successful"``): the same rows, the same triggers."""


async def finish_job(
    cur: Any,
    run_id: str,
    status: str,
    job: int | None,
    *,
    output: Any = None,
    error: Any = None,
    only_if: Sequence[str] = ACTIVE,
    events: tuple[int, Sequence[Any]] | None = None,
) -> tuple[bool, bool]:
    """:func:`finish`, and with ``job`` given, the run's queue job deleted in the same
    statement, as Procrastinate deletes a job that succeeded: a worker's usual end of a run,
    one statement where the run's end and Procrastinate's finish were two. Whether the run
    ended here, and whether the job was deleted here (False: it was gone or ended already)."""
    now = time.time()
    params: list[Any] = [status, encode(output), encode(error), now, now, run_id, list(only_if)]
    parts = [_FINISH]
    if events:
        first, items = events
        parts.insert(0, _ADD_EVENTS)
        params = [run_id, first, [orjson.dumps(e) for e in items], *params]
    if job is not None:
        parts.append(_GONE)
        params.append(job)
    gone = "(SELECT count(*) FROM gone)" if job is not None else "0"
    await cur.execute(f"WITH {', '.join(parts)} SELECT (SELECT count(*) FROM ended), {gone}", params)
    row = await cur.fetchone()
    return (bool(row[0]), bool(row[1])) if row is not None else (False, False)


async def add_events(cur: Any, run_id: str, first: int, events: Sequence[Any]) -> None:
    """Store a run's stream items numbered from ``first``, by one statement (not announced)."""
    await cur.execute(f"WITH {_ADD_EVENTS} SELECT 1", (run_id, first, [orjson.dumps(e) for e in events]))


async def read_events(cur: Any, run_id: str, after: int) -> list[tuple[int, Any]]:
    await cur.execute(
        "SELECT seq, event FROM plait_run_event WHERE run_id = %s AND seq > %s ORDER BY seq", (run_id, after)
    )
    return [(r[0], orjson.loads(bytes(r[1]))) for r in await cur.fetchall()]


SCHEDULE_COLUMNS = "schedule_id, graph, cron, input, thread_id, ns, multitask, metadata, last_tick, created_at, queue"


def row_schedule(row: Sequence[Any]) -> Schedule:
    return Schedule(
        schedule_id=row[0],
        graph=row[1],
        cron=row[2],
        input=decode(row[3]),
        thread_id=row[4],
        namespace=row[5],
        multitask=row[6],
        metadata=decode(row[7]),
        last_tick=row[8],
        created_at=row[9],
    )
