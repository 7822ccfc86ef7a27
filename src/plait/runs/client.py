"""``Runs``: submit runs of a graph to the workers, and follow, list, join and cancel them.

How a run is stored and queued, and what a second run on a busy thread does, is
:mod:`plait.runs._submit`'s (shared with the schedules' fire job).

Async methods are the implementation; each sync method of the same name without the ``a``
wraps its async twin with the same parameters, on a loop the object keeps for its sync calls
(its connection pool belongs to the loop it was opened on). Use one ``Runs`` either from
async code or from sync code, not both.
"""

from __future__ import annotations

import asyncio
import builtins
import datetime
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from plait._aliases import either
from plait.errors import RunNotFoundError, RunWaitTimeoutError, ScheduleNotFoundError
from plait.runs import _schema, _store
from plait.runs._db import Database, connect_kwargs
from plait.runs._portal import Portal
from plait.runs._submit import (
    ADVANCE_TASK,
    DEFAULT_QUEUE,
    Submission,
    check_multitask,
    run_options,
    stream_modes,
    submit,
    thread_lock,
    wire_modes,
)
from plait.runs.cron import check_cron, warn_seconds_first
from plait.runs.records import FINAL, RUN_STATUSES, Multitask, Run, RunStatus, Schedule
from plait.tracing import carrier

__all__ = ["ADVANCE_TASK", "DEFAULT_QUEUE", "Runs", "thread_lock"]

T = TypeVar("T")


class Runs:
    """The runs of graphs on a PostgreSQL database that ``plait worker`` processes serve.

    Args:
        dsn: the PostgreSQL connection string (the database of the checkpoints).
        schema: the Postgres schema of the run tables and the job queue (None: the search path).
        max_connections: the size of the connection pool.

    Example::

        runs = Runs("postgresql://app@db/plait")
        run_id = runs.submit("app.flows:graph", {"question": "hi"}, thread_id="chat-1")
        print(runs.join(run_id, timeout=60).output)
    """

    def __init__(self, dsn: str, *, schema: str | None = None, max_connections: int = 4) -> None:
        self.db = Database(dsn, schema=schema, max_connections=max_connections)
        self._opened = False
        self._jobs: Any = None
        self._portal: Portal | None = None

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of this object from sync code, on the object's own loop (see
        :mod:`plait.runs._portal`)."""
        if self._portal is None:
            self._portal = Portal()
        return self._portal.call(coro)

    # -- lifecycle --------------------------------------------------------------------------

    async def aopen(self, *, check: bool = True) -> None:
        """Connect, and refuse a database whose schema is not set up (idempotent; the other
        methods call it)."""
        if self._opened:
            return
        await self.db.open()
        if check:
            async with self.db.connection() as conn:
                await _schema.check_schema(conn, self.db.schema, self.db.shown)
        from procrastinate.manager import JobManager

        self._jobs = JobManager(self.db.connector)
        self._opened = True

    def open(self, *, check: bool = True) -> None:
        """Sync :meth:`aopen`."""
        self._sync(self.aopen(check=check))

    async def amigrate(self) -> tuple[int | None, bool]:
        """Create or upgrade the run tables and apply Procrastinate's schema (safe to repeat).

        Returns the run tables' version found before and whether the job-queue schema was applied.
        """
        await self.db.open()
        return await asyncio.to_thread(_schema.migrate, self.db.dsn, self.db.schema, self.db.shown)

    def migrate(self) -> tuple[int | None, bool]:
        """Sync :meth:`amigrate`."""
        return self._sync(self.amigrate())

    async def aclose(self) -> None:
        self._opened = False
        await self.db.close()

    def close(self) -> None:
        """Close the pool (and the loop the sync methods run on)."""
        if self._portal is not None:
            self._portal.call(self.aclose())
            self._portal.close()
            self._portal = None

    async def __aenter__(self) -> Runs:
        await self.aopen()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Runs:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- submitting ----------------------------------------------------------------------------

    async def asubmit(
        self,
        graph: str,
        input: Any = None,
        *,
        thread_id: str | None = None,
        namespace: str = "",
        multitask: Multitask = "reject",
        priority: int = 0,
        after: datetime.datetime | None = None,
        context: Any = None,
        metadata: Any = None,
        resume: Any = ...,
        timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
        mode: str | Sequence[str] | None = None,
        stream_mode: str | Sequence[str] | None = None,
        run_id: str | None = None,
        update: Any = None,
        goto: Any = None,
        checkpoint_id: str | None = None,
        interrupt_before: Sequence[str] | None = None,
        interrupt_after: Sequence[str] | None = None,
        durability: str | None = None,
        recursion_limit: int | None = None,
        wire: Mapping[str, Any] | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> str:
        """Store a run of ``graph`` on ``thread_id`` and queue it for the workers.

        Args:
            graph: the name workers know the graph by (``pkg.module:graph``, ``flows.py:graph``).
            input: the channel values to start with; None continues the thread from its
                latest checkpoint (after an error, say).
            thread_id: the thread (None: a new one, named by the run id).
            multitask: what to do when the thread has an active run (see :data:`Multitask`).
            priority: higher runs first, among runs waiting in the same queue.
            after: do not start before this time (timezone-aware).
            context, metadata: JSON data stored with the run, for the application.
            resume: the answer to the thread's pending ``interrupt()`` (runs
                ``Command(resume=...)``); not given: none.
            timeout: seconds the run may take once started; then it ends ``timeout``.
            queue: the queue of workers that may run it (``plait worker --queue``).
            mode: what the worker stores for :meth:`astream` (``"values"``, ``"updates"``,
                ``"events"``, ``"custom"``, or several), as ``CompiledGraph.stream(mode=)``
                takes them; None stores only the run's status changes. ``stream_mode=`` is
                LangGraph's spelling of it (both: a ``TypeError`` unless they agree).
            run_id: the run's id (None: a new UUID). Submitting an id again is refused.
            update, goto: a ``Command``'s update and goto, applied before the run continues
                (with ``resume``, or instead of an input).
            checkpoint_id: start from this checkpoint of the thread (a new branch), as
                ``invoke(checkpoint_id=...)`` does.
            interrupt_before, interrupt_after: breakpoints for this run (node names; ``["*"]``:
                every node), in place of the graph's own.
            durability: ``"sync"``, ``"async"`` or ``"exit"`` (see ``invoke``).
            recursion_limit: the most super-steps the run may take.
            wire: store the stream as the LangGraph API's events (``{"modes": [...],
                "subgraphs": bool}``, the API's stream modes; ``"temporary": True`` deletes
                the thread once the run ended, a stateless run's): what ``plait serve`` asks.
            trace_context: the W3C trace context (``{"traceparent": ..., "tracestate": ...}``)
                the worker's spans of the run continue, when it traces (see docs/tracing.md);
                None: the current OpenTelemetry span's, if one is active.

        Returns:
            The run id.

        Raises:
            RunRejectedError: ``multitask="reject"`` and the thread has an active run.
            ValueError: an unknown multitask strategy or stream mode, or a naive ``after``.
            TraceContextError: a ``trace_context`` with no W3C ``traceparent``.
        """
        check_multitask(multitask)
        trace = carrier.current() if trace_context is None else carrier.checked(trace_context, "trace_context")
        options = run_options(
            update=update, goto=goto, checkpoint_id=checkpoint_id, interrupt_before=interrupt_before,
            interrupt_after=interrupt_after, durability=durability, recursion_limit=recursion_limit, wire=wire,
            trace=trace,
        )  # fmt: skip
        chosen = either("mode", mode, "stream_mode", stream_mode)
        modes = stream_modes(chosen) if wire is None else wire_modes(wire)
        if after is not None and after.utcoffset() is None:
            raise ValueError("after must be timezone-aware (for example datetime.now(UTC) + timedelta(minutes=5))")
        await self.aopen()
        run_id = run_id or uuid.uuid4().hex
        run = Submission(
            run_id=run_id, graph=graph, input=input, thread_id=thread_id or run_id, namespace=namespace,
            multitask=multitask, priority=priority, after=after, context=context, metadata=metadata, resume=resume,
            timeout=timeout, queue=queue, modes=modes, options=options,
        )  # fmt: skip
        async with self.db.connection() as conn, conn.transaction():
            return await submit(conn, self._jobs, run)

    def submit(
        self,
        graph: str,
        input: Any = None,
        *,
        thread_id: str | None = None,
        namespace: str = "",
        multitask: Multitask = "reject",
        priority: int = 0,
        after: datetime.datetime | None = None,
        context: Any = None,
        metadata: Any = None,
        resume: Any = ...,
        timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
        mode: str | Sequence[str] | None = None,
        stream_mode: str | Sequence[str] | None = None,
        run_id: str | None = None,
        update: Any = None,
        goto: Any = None,
        checkpoint_id: str | None = None,
        interrupt_before: Sequence[str] | None = None,
        interrupt_after: Sequence[str] | None = None,
        durability: str | None = None,
        recursion_limit: int | None = None,
        wire: Mapping[str, Any] | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> str:
        """Sync :meth:`asubmit` (the current span is the caller's: the loop runs elsewhere)."""
        return self._sync(
            self.asubmit(
                graph, input, thread_id=thread_id, namespace=namespace, multitask=multitask, priority=priority,
                after=after, context=context, metadata=metadata, resume=resume, timeout=timeout, queue=queue, mode=mode,
                stream_mode=stream_mode, run_id=run_id, update=update, goto=goto, checkpoint_id=checkpoint_id,
                interrupt_before=interrupt_before, interrupt_after=interrupt_after, durability=durability,
                recursion_limit=recursion_limit, wire=wire,
                trace_context=carrier.current() if trace_context is None else trace_context,
            )
        )  # fmt: skip

    # -- reading -------------------------------------------------------------------------------

    async def aget(self, run_id: str) -> Run:
        """The run ``run_id``.

        Raises:
            RunNotFoundError: no such run is stored.
        """
        await self.aopen()
        async with self.db.connection() as conn, conn.cursor() as cur:
            found = await _store.get_run(cur, run_id)
        if found is None:
            raise RunNotFoundError(run_id)
        return found[0]

    def get(self, run_id: str) -> Run:
        """Sync :meth:`aget`."""
        return self._sync(self.aget(run_id))

    async def alist(
        self,
        *,
        thread_id: str | None = None,
        namespace: str | None = None,
        status: RunStatus | None = None,
        graph: str | None = None,
        limit: int | None = 100,
        before: str | None = None,
    ) -> list[Run]:
        """Runs, newest first, filtered by thread, namespace, status and graph; ``limit`` a
        page, ``before`` the last run id of the previous page."""
        if status is not None and status not in RUN_STATUSES:
            raise ValueError(f"status={status!r} is not a run status; use one of {', '.join(RUN_STATUSES)}")
        await self.aopen()
        async with self.db.connection() as conn, conn.cursor() as cur:
            return await _store.list_runs(
                cur, thread_id=thread_id, namespace=namespace, status=status, graph=graph, limit=limit, before=before
            )

    def list(
        self,
        *,
        thread_id: str | None = None,
        namespace: str | None = None,
        status: RunStatus | None = None,
        graph: str | None = None,
        limit: int | None = 100,
        before: str | None = None,
    ) -> builtins.list[Run]:
        """Sync :meth:`alist`."""
        return self._sync(
            self.alist(thread_id=thread_id, namespace=namespace, status=status, graph=graph, limit=limit, before=before)
        )

    # -- cancelling ----------------------------------------------------------------------------

    async def acancel(self, run_id: str, *, action: str = "cancel") -> bool:
        """Cancel a run: a pending one never starts; a running one stops at once with
        ``action="cancel"`` (its committed checkpoints stay; the thread is resumable), at its
        next super-step boundary with ``"interrupt"`` (it ends ``interrupted``), or there with
        ``"rollback"``, which then drops the checkpoints it wrote and the run itself (as
        LangGraph's cancel with ``rollback`` does). False when it had ended already.

        Raises:
            RunNotFoundError: no such run is stored.
            ValueError: an unknown action.
        """
        if action not in ("cancel", "interrupt", "rollback"):
            raise ValueError(f"action={action!r}: use 'cancel', 'interrupt' or 'rollback'")
        stop = {"cancel": "cancel", "interrupt": "interrupt", "rollback": "discard"}[action]
        await self.aopen()
        async with self.db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute("SELECT status, job_id FROM plait_run WHERE run_id = %s FOR UPDATE", (run_id,))
            row = await cur.fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            status, job_id = row
            if status in FINAL:
                return False
            if status == "pending":
                if job_id is not None:
                    await self._jobs.cancel_job_by_id_async(job_id, connection=conn)
                if stop == "discard":
                    await cur.execute("DELETE FROM plait_run WHERE run_id = %s AND status = 'pending'", (run_id,))
                    await _store.notify(cur, "end", run_id)
                else:
                    ended = "cancelled" if stop == "cancel" else "interrupted"
                    reason = {"type": "Cancelled", "message": f"cancelled before it started ({action})"}
                    if await _store.finish(cur, run_id, ended, error=reason):
                        await _store.notify(cur, "end", run_id)
            await cur.execute("UPDATE plait_run SET stop = %s WHERE run_id = %s AND status = 'running'", (stop, run_id))
            await _store.notify(cur, "stop", run_id)
            return True

    def cancel(self, run_id: str, *, action: str = "cancel") -> bool:
        """Sync :meth:`acancel`."""
        return self._sync(self.acancel(run_id, action=action))

    # -- following -----------------------------------------------------------------------------

    async def ajoin(self, run_id: str, timeout: float | None = None) -> Run:
        """Wait until the run ends and return it, whatever its status.

        Raises:
            RunWaitTimeoutError: it did not end within ``timeout`` seconds (it goes on).
            RunNotFoundError: no such run is stored.
        """
        await self.aopen()
        deadline = None if timeout is None else time.monotonic() + timeout
        async for run in self._follow(run_id, deadline, events=False):
            if run is not None and run.done:
                return run
        run = await self.aget(run_id)
        if run.done:
            return run
        raise RunWaitTimeoutError(run_id, timeout or 0.0, run.status)

    def join(self, run_id: str, timeout: float | None = None) -> Run:
        """Sync :meth:`ajoin`."""
        return self._sync(self.ajoin(run_id, timeout))

    await_run = ajoin
    """The old name of :meth:`ajoin` (kept working: same function)."""
    wait = join
    """The old name of :meth:`join` (kept working: same function)."""

    async def _follow(self, run_id: str, deadline: float | None, *, events: bool) -> AsyncIterator[Run | None]:
        """Yield the run each time something about it may have changed (an end, new events),
        woken by NOTIFY on a connection of its own, polling once a second besides."""
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            self.db.dsn, autocommit=True, **connect_kwargs(self.db.schema)
        ) as listen:
            await listen.execute(f"LISTEN {_store.CHANNEL}")
            wanted = {f"end:{run_id}"} | ({f"event:{run_id}"} if events else set())
            while True:
                yield await self.aget(run_id)
                left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                if left <= 0:
                    return
                async for note in listen.notifies(timeout=left):
                    if note.payload in wanted:
                        break

    async def astream(self, run_id: str, *, timeout: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """What the run's worker reports, as it reports it, until the run ends: items
        ``{"mode": ..., "data": ...}`` with modes ``"status"`` (the run's status changes,
        the last one final) and those the run was submitted with (``stream_mode``),
        whichever worker runs it (a run resumed elsewhere continues the same stream).

        Raises:
            RunWaitTimeoutError: it did not end within ``timeout`` seconds.
        """
        await self.aopen()
        deadline = None if timeout is None else time.monotonic() + timeout
        seen, last_status = 0, None
        async for run in self._follow(run_id, deadline, events=True):
            assert run is not None
            async with self.db.connection() as conn, conn.cursor() as cur:
                items = await _store.read_events(cur, run_id, seen)
            for seq, item in items:
                seen = seq
                if item.get("mode") == "status":
                    last_status = item["data"]["status"]
                yield item
            if run.done and not items:
                if last_status != run.status:
                    yield {"mode": "status", "data": {"status": run.status, "error": run.error}}
                return
            if run.status != last_status and not items and run.status == "running" and last_status is None:
                last_status = run.status
                yield {"mode": "status", "data": {"status": run.status, "error": None}}
        run = await self.aget(run_id)
        raise RunWaitTimeoutError(run_id, timeout or 0.0, run.status)

    def stream(self, run_id: str, *, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Sync :meth:`astream`."""
        if self._portal is None:
            self._portal = Portal()
        yield from self._portal.iterate(self.astream(run_id, timeout=timeout))

    # -- schedules -----------------------------------------------------------------------------

    async def aschedule(
        self,
        graph: str,
        cron: str,
        input: Any = None,
        *,
        thread_id: str | None = None,
        namespace: str = "",
        multitask: Multitask = "enqueue",
        metadata: Any = None,
        queue: str = DEFAULT_QUEUE,
        schedule_id: str | None = None,
    ) -> str:
        """Submit a run of ``graph`` at every tick of ``cron`` (five fields, or six with
        seconds last), exactly once per tick however many workers run. Ticks are fired by
        the workers (one deduplicated periodic job a second); ticks missed while no worker
        ran are fired when one is back, up to :data:`~plait.runs.schedules.CATCH_UP` per
        schedule. Returns the schedule id; :func:`plait.runs.cron.next_fires` says when it
        fires next.

        Warns :class:`~plait.runs.cron.CronFieldsWarning` when ``cron`` looks written seconds
        first (Quartz, APScheduler), saying what to write instead; it is stored as given.

        Raises:
            ValueError: a cron expression croniter cannot read, or an unknown multitask.
        """
        check_cron(cron)
        check_multitask(multitask)
        warn_seconds_first(cron)
        return await self._insert_schedule(
            graph, cron, input, thread_id, namespace, multitask, metadata, queue, schedule_id
        )

    async def _insert_schedule(
        self, graph: str, cron: str, input: Any, thread_id: str | None, namespace: str, multitask: str,
        metadata: Any, queue: str, schedule_id: str | None,
    ) -> str:  # fmt: skip
        await self.aopen()
        schedule_id = schedule_id or uuid.uuid4().hex
        async with self.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "INSERT INTO plait_schedule (schedule_id, graph, cron, input, thread_id, ns, multitask, metadata, "
                "queue, last_tick, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    schedule_id, graph, cron, _store.encode(input), thread_id, namespace, multitask,
                    _store.encode(metadata), queue, int(time.time()), time.time(),
                ),
            )  # fmt: skip
        return schedule_id

    def schedule(
        self,
        graph: str,
        cron: str,
        input: Any = None,
        *,
        thread_id: str | None = None,
        namespace: str = "",
        multitask: Multitask = "enqueue",
        metadata: Any = None,
        queue: str = DEFAULT_QUEUE,
        schedule_id: str | None = None,
    ) -> str:
        """Sync :meth:`aschedule` (its warning points at the caller here, not at a loop)."""
        check_cron(cron)
        check_multitask(multitask)
        warn_seconds_first(cron)
        return self._sync(
            self._insert_schedule(graph, cron, input, thread_id, namespace, multitask, metadata, queue, schedule_id)
        )

    async def aschedules(self) -> builtins.list[Schedule]:
        """Every schedule, oldest first."""
        await self.aopen()
        async with self.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(f"SELECT {_store.SCHEDULE_COLUMNS} FROM plait_schedule ORDER BY created_at")
            return [_store.row_schedule(r) for r in await cur.fetchall()]

    def schedules(self) -> builtins.list[Schedule]:
        """Sync :meth:`aschedules`."""
        return self._sync(self.aschedules())

    async def aunschedule(self, schedule_id: str) -> None:
        """Remove a schedule (runs it submitted stay).

        Raises:
            ScheduleNotFoundError: no such schedule.
        """
        await self.aopen()
        async with self.db.connection() as conn, conn.cursor() as cur:
            await cur.execute("DELETE FROM plait_schedule WHERE schedule_id = %s RETURNING 1", (schedule_id,))
            if await cur.fetchone() is None:
                raise ScheduleNotFoundError(schedule_id)

    def unschedule(self, schedule_id: str) -> None:
        """Sync :meth:`aunschedule`."""
        self._sync(self.aunschedule(schedule_id))

    # -- limits --------------------------------------------------------------------------------

    async def aset_limit(
        self,
        graph: str,
        *,
        max_running: int | None = None,
        starts_per_second: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Limit the runs of ``graph`` across every worker: at most ``max_running`` at once,
        and starts at ``starts_per_second`` on average with bursts of up to ``burst``
        (default: one second's worth, at least 1). None lifts a limit. Runs over a limit wait
        (``pending``) until it lets them start."""
        if max_running is not None and max_running < 1:
            raise ValueError("max_running must be at least 1 (or None: no limit)")
        if starts_per_second is not None and starts_per_second <= 0:
            raise ValueError("starts_per_second must be positive (or None: no limit)")
        size = None if starts_per_second is None else max(1.0, burst if burst is not None else starts_per_second)
        await self.aopen()
        async with self.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "INSERT INTO plait_run_limit (graph, max_running, rate, burst, tokens, refilled_at) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (graph) DO UPDATE SET max_running = excluded.max_running, "
                "rate = excluded.rate, burst = excluded.burst, tokens = excluded.tokens, "
                "refilled_at = excluded.refilled_at",
                (graph, max_running, starts_per_second, size, size or 0.0, time.time()),
            )

    def set_limit(
        self,
        graph: str,
        *,
        max_running: int | None = None,
        starts_per_second: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Sync :meth:`aset_limit`."""
        self._sync(self.aset_limit(graph, max_running=max_running, starts_per_second=starts_per_second, burst=burst))
