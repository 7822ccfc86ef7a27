"""Submitting a run: its row and its job, in the caller's transaction.

A run is stored by plait (``plait_run``) and queued as one Procrastinate job, "advance run R
from its thread's latest committed checkpoint", in the same transaction, so that no run is
stored without its job nor queued without its row. The job's Procrastinate ``lock`` is the
thread: the jobs of one thread run one at a time, in the order they were queued.

What a second run on a busy thread does is decided here, in the transaction that stores it,
under a per-thread advisory lock (so two submits to one thread are decided one after the
other): see :data:`~plait.runs.records.Multitask`.

Below both callers: :meth:`plait.runs.Runs.asubmit` (a transaction of its own) and the
schedules' fire job (:func:`plait.runs.schedules.fire_due`, one savepoint per tick in the
transaction that moves the schedule).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plait.errors import RunRejectedError
from plait.runs import _store
from plait.runs.records import MULTITASK, Multitask

if TYPE_CHECKING:
    from procrastinate.manager import JobManager

__all__ = [
    "ADVANCE_TASK",
    "DEFAULT_QUEUE",
    "Submission",
    "check_multitask",
    "run_options",
    "stream_modes",
    "submit",
    "thread_lock",
    "wire_modes",
]

ADVANCE_TASK = "plait.advance_run"
"""The Procrastinate task name of a run's job."""
DEFAULT_QUEUE = "plait"
_THREAD_LOCK = 0x706C6174  # "plat": first key of the per-thread advisory lock of submit()
_STREAM_MODES = ("values", "updates", "events", "custom")


def thread_lock(namespace: str, thread_id: str) -> str:
    """The Procrastinate job lock of a thread: its runs' jobs never run at the same time."""
    return f"plait-thread:{namespace}/{thread_id}"


def check_multitask(multitask: str) -> None:
    """Refuse an unknown multitask strategy before anything is stored."""
    if multitask not in MULTITASK:
        raise ValueError(f"multitask={multitask!r}: use one of {', '.join(MULTITASK)}")


def stream_modes(stream_mode: str | Sequence[str] | None) -> list[str]:
    """The stream modes a run stores, refused when unknown."""
    modes = [] if stream_mode is None else [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    for m in modes:
        if m not in _STREAM_MODES:
            raise ValueError(f"unknown stream mode {m!r}: use 'values', 'updates', 'events' or 'custom'")
    return modes


def wire_modes(wire: Mapping[str, Any]) -> list[str]:
    """plait's stream modes a run stored as the LangGraph API's events needs (its ``wire``
    names the API's modes), refused when one is unknown."""
    from plait.stream_wire import library_modes

    modes = wire.get("modes")
    if not isinstance(modes, list | tuple) or not all(isinstance(m, str) for m in modes):
        raise ValueError("wire['modes'] must be a list of the LangGraph API's stream modes")
    return list(library_modes(list(modes) or ["values"]))


def run_options(**given: Any) -> dict[str, Any] | None:
    """A run's :attr:`~plait.runs.records.Run.options` from ``submit``'s keywords, checked (None:
    none given)."""
    options = {k: v for k, v in given.items() if v is not None}
    durability = options.get("durability")
    if durability is not None and durability not in ("sync", "async", "exit"):
        raise ValueError(f"durability must be 'sync', 'async' or 'exit', got {durability!r}")
    limit = options.get("recursion_limit")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError("recursion_limit must be a whole number of at least 1")
    for key in ("interrupt_before", "interrupt_after"):
        if key in options:
            names = options[key]
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ValueError(f"{key} must be a list of node names")
            options[key] = list(names)
    if "wire" in options:
        given = options["wire"]
        options["wire"] = {"modes": list(given.get("modes") or ["values"]), "subgraphs": bool(given.get("subgraphs")),
                           **({"temporary": True} if given.get("temporary") else {})}  # fmt: skip
    return options or None


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """One run to store and queue, its arguments checked (see :meth:`Runs.asubmit`)."""

    run_id: str
    graph: str
    input: Any
    thread_id: str
    namespace: str
    multitask: Multitask
    priority: int = 0
    after: datetime.datetime | None = None
    context: Any = None
    metadata: Any = None
    resume: Any = ...
    timeout: float | None = None
    queue: str = DEFAULT_QUEUE
    modes: Sequence[str] = ()
    schedule: tuple[str, int] | None = None
    """The schedule and the cron tick that submit it: a tick submitted already is skipped."""
    options: Mapping[str, Any] | None = None
    """See :attr:`plait.runs.records.Run.options`."""


async def submit(conn: Any, jobs: JobManager, s: Submission) -> str:
    """Store and queue ``s`` in the transaction open on ``conn``.

    Returns:
        The run id; "" when ``s`` is a schedule's tick that has a run already.

    Raises:
        RunRejectedError: ``multitask="reject"`` and the thread has an active run.
    """
    from procrastinate import jobs as procrastinate_jobs

    now = time.time()
    rollback_of: list[str] = []
    async with conn.cursor() as cur:
        await cur.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_THREAD_LOCK, f"{s.namespace}/{s.thread_id}")
        )
        active = await _store.active_runs(cur, s.namespace, s.thread_id)
        if active and s.multitask == "reject":
            raise RunRejectedError(s.thread_id, active[0][0], active[0][1], namespace=s.namespace)
        if active and s.multitask in ("interrupt", "rollback"):
            for other, status, job_id, _ in active:
                rollback_of.append(other)
                await _stop(cur, conn, jobs, other, status, job_id, s.multitask)
        await cur.execute(
            "INSERT INTO plait_run (run_id, graph, ns, thread_id, status, multitask, input, resume, has_resume, "
            "context, metadata, priority, queue, timeout, rollback_of, schedule_id, tick, created_at, updated_at, "
            "stream, options) VALUES (%s, %s, %s, %s, 'pending', " + ", ".join(["%s"] * 16) + ") "
            "ON CONFLICT (schedule_id, tick) DO NOTHING RETURNING run_id",
            (
                s.run_id, s.graph, s.namespace, s.thread_id, s.multitask, _store.encode(s.input),
                _store.encode(None if s.resume is ... else s.resume), s.resume is not ..., _store.encode(s.context),
                _store.encode(s.metadata), s.priority, s.queue, s.timeout,
                rollback_of if s.multitask == "rollback" else None,
                s.schedule[0] if s.schedule else None, s.schedule[1] if s.schedule else None, now, now,
                list(s.modes) or None, _store.encode(dict(s.options) if s.options else None),
            ),
        )  # fmt: skip
        if await cur.fetchone() is None:  # a schedule's tick submitted already
            return ""
        job = procrastinate_jobs.Job(
            queue=s.queue,
            lock=thread_lock(s.namespace, s.thread_id),
            queueing_lock=None,
            task_name=ADVANCE_TASK,
            task_kwargs={"run_id": s.run_id},
            priority=s.priority,
            scheduled_at=s.after,
        )
        deferred = await jobs.defer_job_async(job, connection=conn)
        await cur.execute("UPDATE plait_run SET job_id = %s WHERE run_id = %s", (deferred.id, s.run_id))
    return s.run_id


async def _stop(cur: Any, conn: Any, jobs: JobManager, run_id: str, status: str, job_id: int | None, why: str) -> None:
    """Stop an active run for a newer one: a pending run never starts; a running one
    stops at its next super-step boundary (its worker is told at once by NOTIFY)."""
    if status == "pending":
        if job_id is not None:
            await jobs.cancel_job_by_id_async(job_id, connection=conn)
        reason = {"type": "Interrupted", "message": f"stopped before it started by a newer run ({why})"}
        if await _store.finish(cur, run_id, "interrupted", error=reason, only_if=("pending",)):
            await _store.notify(cur, "end", run_id)
    # a pending run whose job a worker fetched meanwhile is stopped by its worker, too
    await cur.execute("UPDATE plait_run SET stop = %s WHERE run_id = %s AND status = 'running'", (why, run_id))
    await _store.notify(cur, "stop", run_id)
