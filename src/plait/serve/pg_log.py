"""The run log on PostgreSQL: the API's runs are :mod:`plait.runs`' runs, their events what
the workers stored for them (as the LangGraph API's events), and the API's threads a table
of the run tables (``plait_serve_thread``), all in the database of the checkpoints.

Nothing here writes a run or an event: :class:`~plait.serve.queue_runner.QueueRunner`
submits runs to the queue and workers execute them, in this process or any other. A run
of the queue shows under the API's names: ``cancelled`` as ``interrupted``, and a run that
paused on ``interrupt()`` as ``success`` (its thread is ``interrupted``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from plait.errors import RunNotFoundError
from plait.runs import Run, Runs
from plait.runs.records import ACTIVE, FINAL
from plait.serve.assistants import assistant_id_of
from plait.serve.log import RunLog, thread_order, with_metadata
from plait.serve.records import ApiRunStatus, RunRecord, StoredEvent, ThreadRecord
from plait.serve.wire import dumps

__all__ = ["PgRunLog", "record_of"]


def _status(run: Run) -> ApiRunStatus:
    if run.status == "cancelled":
        return "interrupted"
    if run.status == "interrupted":
        return "success" if run.error is None else "interrupted"  # paused for input, or stopped
    return run.status


def record_of(run: Run) -> RunRecord:
    """The API's view of a run of the queue."""
    options = run.options if isinstance(run.options, Mapping) else {}
    error = None
    if run.error:
        name = run.error.get("cause") or run.error.get("type", "Error")
        error = {"error": name, "message": run.error.get("message", "")}
    status = _status(run)
    output: Any = run.output
    if status in ("error", "timeout"):
        output = {"__error__": error or {"error": "Error", "message": "the run failed"}}
    kwargs = dict(options.get("api") or {})
    temporary = bool((options.get("wire") or {}).get("temporary"))
    return RunRecord(
        run_id=run.run_id, thread_id=run.thread_id, assistant_id=assistant_id_of(run.graph), graph=run.graph,
        status=status, metadata=run.metadata if isinstance(run.metadata, dict) else {}, kwargs=kwargs,
        multitask=run.multitask, created_at=run.created_at, updated_at=run.updated_at, attempts=run.attempts,
        output=output, error=error, start_checkpoint=run.start_checkpoint, temporary=temporary,
    )  # fmt: skip


class PgRunLog(RunLog):
    """The run log over ``runs`` (its pool and tables)."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    async def open(self) -> None:
        """Create or upgrade the run tables (the API's threads are among them), then open."""
        await self.runs.amigrate()
        await self.runs.aopen()

    async def close(self) -> None:
        await self.runs.aclose()

    async def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(sql, params)
            return list(await cur.fetchall())

    async def _execute(self, sql: str, params: Sequence[Any]) -> int:
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(sql, params)
            return int(cur.rowcount)

    # -- threads ---------------------------------------------------------------------------

    async def put_thread(self, record: ThreadRecord) -> tuple[ThreadRecord, bool]:
        created = await self._execute(
            "INSERT INTO plait_serve_thread VALUES (%s, %s, %s, %s) ON CONFLICT (thread_id) DO NOTHING",
            (record.thread_id, orjson.dumps(record.metadata), record.created_at, record.updated_at),
        )
        if created:
            return record, True
        found = await self.get_thread(record.thread_id)
        assert found is not None
        return found, False

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        rows = await self._rows(
            "SELECT thread_id, metadata, created_at, updated_at FROM plait_serve_thread WHERE thread_id = %s",
            (thread_id,),
        )
        return _thread_of(rows[0]) if rows else None

    async def update_thread(self, thread_id: str, metadata: Mapping[str, Any], now: float) -> ThreadRecord | None:
        async with self.runs.db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(
                "SELECT thread_id, metadata, created_at, updated_at FROM plait_serve_thread "
                "WHERE thread_id = %s FOR UPDATE",
                (thread_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            found = _thread_of(row)
            merged = {**found.metadata, **metadata}
            await cur.execute(
                "UPDATE plait_serve_thread SET metadata = %s, updated_at = %s WHERE thread_id = %s",
                (orjson.dumps(merged), now, thread_id),
            )
        return ThreadRecord(thread_id=thread_id, metadata=merged, created_at=found.created_at, updated_at=now)

    async def touch_thread(self, thread_id: str, now: float) -> None:
        await self._execute("UPDATE plait_serve_thread SET updated_at = %s WHERE thread_id = %s", (now, thread_id))

    async def delete_thread(self, thread_id: str) -> bool:
        async with self.runs.db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute("DELETE FROM plait_run WHERE ns = '' AND thread_id = %s", (thread_id,))
            await cur.execute("DELETE FROM plait_serve_thread WHERE thread_id = %s", (thread_id,))
            return bool(cur.rowcount)

    async def search_threads(
        self, *, metadata: Mapping[str, Any] | None, ids: Sequence[str] | None, sort_by: str, descending: bool
    ) -> list[ThreadRecord]:
        sql = "SELECT thread_id, metadata, created_at, updated_at FROM plait_serve_thread"
        params: list[Any] = []
        if ids is not None:
            sql += " WHERE thread_id = ANY(%s)"
            params.append(list(ids))
        sql += thread_order(sort_by, descending)
        rows = [_thread_of(r) for r in await self._rows(sql, params)]
        return with_metadata(rows, metadata)

    # -- runs ------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        try:
            return record_of(await self.runs.aget(run_id))
        except RunNotFoundError:
            return None

    async def active_runs(self, thread_id: str) -> list[RunRecord]:
        rows = await self._rows(
            "SELECT run_id FROM plait_run WHERE ns = '' AND thread_id = %s AND status = ANY(%s) ORDER BY seq",
            (thread_id, list(ACTIVE)),
        )
        found = [await self.get_run(row[0]) for row in rows]
        return [r for r in found if r is not None and not r.done]

    async def runs_of(self, thread_id: str, *, status: str | None = None) -> list[RunRecord]:
        found = [record_of(r) for r in await self.runs.alist(thread_id=thread_id, namespace="", limit=None)]
        found.sort(key=lambda r: r.created_at)
        return [r for r in found if status is None or r.status == status]

    async def delete_run(self, run_id: str) -> None:
        await self._execute("DELETE FROM plait_run WHERE run_id = %s", (run_id,))

    # -- events ----------------------------------------------------------------------------

    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        rows = await self._rows(
            "SELECT seq, event FROM plait_run_event WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (run_id, after, limit),
        )
        out = []
        for seq, blob in rows:
            item = orjson.loads(bytes(blob))
            name = item.get("event") or item.get("mode") or "message"
            out.append(StoredEvent(int(seq), str(name), dumps(item.get("data"))))
        return out

    async def drop_events(self, ended_before: float) -> int:
        return await self._execute(
            "DELETE FROM plait_run_event WHERE run_id IN (SELECT run_id FROM plait_run "
            "WHERE status = ANY(%s) AND coalesce(finished_at, updated_at) < %s)",
            (list(FINAL), ended_before),
        )


def _thread_of(row: Sequence[Any]) -> ThreadRecord:
    return ThreadRecord(thread_id=row[0], metadata=orjson.loads(bytes(row[1])), created_at=row[2], updated_at=row[3])
