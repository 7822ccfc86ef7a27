"""The worker: a Procrastinate worker whose one job is "advance run R from its thread's latest committed
checkpoint".

Procrastinate claims jobs, heartbeats, finds the jobs of workers whose heartbeat stopped (swept by a periodic
task here, every ``sweep_every`` seconds) and runs them again elsewhere; its job lock per thread keeps each
thread's runs in order. plait runs the graph with the thread's lease taken under the worker's own owner name,
so a stalled worker that lost its lease can never write again, and records the run's outcome.

Why a run resumes right: a job never replays code, it reloads state. On its first attempt a run notes the
thread's head (``start_checkpoint``); an attempt that finds the head moved past it knows the input landed and
continues the thread (``invoke(None)``), one that finds it unmoved applies the input. Only the super-step that
was in flight runs again.

Stopping: ``interrupt``/``rollback`` by a newer run and the first SIGTERM stop a run at its next super-step
boundary (after a checkpoint is committed, so nothing is lost); ``cancel``, a ``timeout`` and a second SIGTERM
stop it at once (the step in flight re-runs when the thread resumes). A run stopped by SIGTERM is put back in
the queue for another worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.rewind import rewind
from plait.checkpoint.sweeper import DEFAULT_RETENTION_SWEEP, RetentionSweeper
from plait.engine.emitter import INTERRUPT_KEY
from plait.errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointNotFoundError,
    LeaseLostError,
    ThreadBusyError,
    UnknownGraphError,
)
from plait.runs import _store
from plait.runs._claims import Claims
from plait.runs._ended import EndedJobs
from plait.runs._events import Events
from plait.runs._limits import Limits
from plait.runs._notify import Notifier
from plait.runs._prepare import drive, drop_temporary, prepared, start_rider, wants_root
from plait.runs._stops import Handle, Requeue, RequeueStrategy, Steering, database_failure
from plait.runs.client import ADVANCE_TASK, DEFAULT_QUEUE, Runs
from plait.runs.records import Run
from plait.runs.schedules import fire_due
from plait.runs.serving import start_advert
from plait.store.sweeper import Sweeper
from plait.stream_wire import error_name

if TYPE_CHECKING:
    from plait.func import Entrypoint
    from plait.graph.compiled import CompiledGraph

__all__ = ["SWEEP_TASK", "TICK_TASK", "Worker", "WorkerSettings"]

log = logging.getLogger("plait.runs.worker")

SWEEP_TASK = "plait.sweep_stalled"
TICK_TASK = "plait.fire_schedules"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """How a worker claims, heartbeats and recovers (``plait worker`` options of the same names)."""

    concurrency: int = 10
    """Runs this worker runs at once (async nodes share one event loop)."""
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)
    heartbeat: float = 10.0
    """Seconds between this worker's heartbeats."""
    stalled_after: float = 30.0
    """Seconds without a heartbeat after which a worker is taken for dead and its runs are
    given to others. Keep it several heartbeats long."""
    sweep_every: int = 5
    """Seconds between sweeps for stalled runs (a periodic job, run by one worker each time)."""
    lease_ttl: float = 30.0
    """Seconds a run's thread lease lasts unless renewed; a run of a dead worker on another
    machine is resumed once it ran out (on the same machine: at once)."""
    poll: float = 5.0
    """Seconds between polls for new jobs when no notification came (LISTEN/NOTIFY wakes
    workers at once; the poll is the fallback)."""
    shutdown_timeout: float | None = None
    """Seconds a SIGTERM'd worker waits for its runs to reach a super-step boundary before
    stopping them at once (None: no limit; a second SIGTERM stops them at once)."""
    memory_sweep_minutes: float | None = None
    """Minutes between sweeps of expired memory items in the checkpointer's database; None:
    the shortest ``sweep_interval_minutes`` of the graphs' stores there, else 60."""
    retention_sweep: float = DEFAULT_RETENTION_SWEEP
    """Seconds between retention sweeps of the checkpointer's database (the stored policy and
    each thread's own; see :class:`~plait.checkpoint.sweeper.RetentionSweeper`); 0: none. Every
    worker may run one: PostgreSQL's advisory lock lets one sweep at a time."""


class Worker:
    """Runs the runs of the given graphs queued on ``dsn``, until stopped.

    Args:
        dsn: the PostgreSQL database of the runs and the checkpoints.
        graphs: the graphs this worker runs, by the names runs are submitted under: a mapping
            of name to graph (or entrypoint: it runs as its graph), or names to load
            (``pkg.module:graph``, ``file.py:graph``).
        schema: the Postgres schema of the runs, the job queue and the checkpoints.
        name: the worker's name in lease owners and logs (default ``host:pid``).
        settings: see :class:`WorkerSettings`.
    """

    def __init__(
        self,
        dsn: str,
        graphs: Mapping[str, CompiledGraph | Entrypoint] | Sequence[str],
        *,
        schema: str | None = None,
        name: str | None = None,
        settings: WorkerSettings | None = None,
    ) -> None:
        from plait.graph.loading import compiled_of, load_graph

        self.settings = settings or WorkerSettings()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.graphs: dict[str, CompiledGraph] = (
            {k: compiled_of(g) for k, g in graphs.items()}
            if isinstance(graphs, Mapping)
            else {g: load_graph(g) for g in graphs}
        )
        self.runs = Runs(dsn, schema=schema, max_connections=max(4, min(self.settings.concurrency + 5, 20)))
        self._schema = schema
        self._checkpointer: Checkpointer | None = None
        self._bound: dict[tuple[str, str], CompiledGraph] = {}
        self._names = frozenset(self.graphs)
        self._running: dict[str, Handle] = {}
        self._app: Any = None
        self._runner: asyncio.Task[None] | None = None
        """The task running Procrastinate's worker (``App.run_worker_async``)."""
        self._limits: Limits | None = None
        self._notifier: Notifier = Notifier(None)
        self._ended = EndedJobs()
        self._claims = Claims()
        self._stopping = 0
        self.memory_sweeper: Sweeper | None = None  # deletes expired memory items (plait.Store)
        self.retention_sweeper: RetentionSweeper | None = None  # applies the retention policy
        self.started = asyncio.Event()
        """Set once the worker is registered and fetching jobs (tests wait on it)."""

    # -- running the worker ---------------------------------------------------------------------

    async def arun(self, *, install_signal_handlers: bool = True) -> None:
        """Run until stopped (:meth:`stop`, or SIGTERM/SIGINT when ``install_signal_handlers``)."""
        from plait.checkpoint.address import open_postgres
        from plait.runs._db import connect_kwargs

        s = self.settings
        await self.runs.aopen()
        self._notifier = Notifier(self.runs.db.pool)
        db = self.runs.db
        # runs' leases, reads and commits go on the queue's pool (no query threads on their
        # way); the checkpointer's own pool serves the rest (sweeps, writes)
        self._checkpointer = open_postgres(db.dsn, schema=self._schema, lease_ttl=s.lease_ttl, max_connections=2)
        await self._checkpointer.asetup()
        if hasattr(self._checkpointer, "use_async_pool"):
            self._checkpointer.use_async_pool(db.pool)
        self._limits = Limits(db.dsn, connect_kwargs(db.schema), db.pool)
        self._app = app = self._claims.installed(self._ended.installed(db.app()), self.name, self._claimable)
        app.task(name=ADVANCE_TASK, pass_context=True, retry=RequeueStrategy(), queue=DEFAULT_QUEUE)(self._advance)
        sweep = app.task(name=SWEEP_TASK, queue=s.queues[0])(self._sweep)
        app.periodic(cron=f"* * * * * */{max(1, int(s.sweep_every))}", periodic_id="plait-sweep")(sweep)
        tick = app.task(name=TICK_TASK, queue=s.queues[0])(self._tick)
        app.periodic(cron="* * * * * *", periodic_id="plait-schedules")(tick)
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        listener = asyncio.create_task(self._listen(), name="plait stop listener")
        side = (listener, await start_advert(db, self.name, self.graphs, s.queues, s.heartbeat, s.stalled_after))
        if self._checkpointer.capabilities.memory:  # graphs compiled with Store(cp, ttl=...) keep their interval
            stores = [g.bind(checkpointer=self._checkpointer).binding.store for g in self.graphs.values()]
            self.memory_sweeper = Sweeper.of(self._checkpointer.store, stores, every_minutes=s.memory_sweep_minutes)
            self.memory_sweeper.start()
        if s.retention_sweep > 0:
            self.retention_sweeper = RetentionSweeper(self._checkpointer, every=s.retention_sweep)
            self.retention_sweeper.start()
        try:
            await app.job_manager.prune_stalled_workers(s.stalled_after)
            options: dict[str, Any] = {
                "queues": list(s.queues),
                "name": self.name,
                "concurrency": s.concurrency,
                "fetch_job_polling_interval": s.poll,
                "abort_job_polling_interval": s.poll,
                "install_signal_handlers": False,
                "update_heartbeat_interval": s.heartbeat,
                "stalled_worker_timeout": s.stalled_after,
                # the run table is the record of a run: a job that did its work is deleted, not
                # kept as a row (and three event rows) the queue's tables would keep growing by
                "delete_jobs": "successful",
            }
            if s.shutdown_timeout is not None:
                options["shutdown_graceful_timeout"] = s.shutdown_timeout
            await self._serve(app, options, db.shown)
        finally:
            for task in side:  # the advert, cancelled, withdraws the worker's row
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            if self.memory_sweeper is not None:
                await self.memory_sweeper.astop()
            if self.retention_sweeper is not None:
                await self.retention_sweeper.astop()
            await self._checkpointer.aclose()
            await self._notifier.aclose()
            await self.runs.aclose()

    async def _serve(self, app: Any, options: dict[str, Any], shown: str) -> None:
        """Run Procrastinate's worker until stopped; when it stops on a database failure (a PostgreSQL
        restart, a lost network), start it again once the database answers (its jobs: found stalled, rerun)."""
        pause = 0.5
        while True:
            runner = self._runner = asyncio.create_task(app.run_worker_async(**options), name="procrastinate worker")
            if self._stopping:  # stopped while it was being started: it stops as soon as it runs
                runner.cancel()
            else:
                self.started.set()
                log.info("worker %s started on %s, graphs %s", self.name, shown, ", ".join(self.graphs))
            why = "it stopped"  # Procrastinate stops its worker when a side task (its listener) fails
            try:
                await runner
            except asyncio.CancelledError:
                if not self._stopping:  # this task itself was cancelled, not the queue's worker stopped
                    raise
            except Exception as exc:
                why = str(exc).strip() or type(exc).__name__
            if self._stopping:
                return
            log.warning(
                "worker %s: the job queue stopped (%s: the database?); starting again in %.1fs", self.name, why, pause
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    def run(self) -> None:
        """Sync :meth:`arun` (in a fresh event loop)."""
        asyncio.run(self.arun())

    def stop(self) -> None:
        """The first call: take no new runs, stop the running ones at their next super-step
        boundary, put them back in the queue and exit. The second: stop them at once."""
        self._stopping += 1
        runner = self._runner
        if self._stopping == 1:
            log.info("worker %s stopping: runs stop at their next super-step boundary", self.name)
            for handle in self._running.values():
                handle.stop = handle.stop or "shutdown"
        else:
            log.info("worker %s stopping now", self.name)
            for handle in self._running.values():
                handle.stop_now = handle.stop_now or "shutdown"
                handle.now.set()
        if runner is not None and self._stopping == 1:
            # Procrastinate's documented way to stop the worker run_worker_async runs: it stops fetching,
            # waits for its jobs (up to shutdown_graceful_timeout), and returns. Once is enough: a second
            # cancel would cut that wait short, while the runs here are told to stop at once by their handles.
            runner.cancel()

    async def _listen(self) -> None:
        """Stop requests for the runs running here, as they come (NOTIFY), and by a poll once a second
        besides (a notification sent while the connection was down is lost)."""
        import psycopg

        from plait.runs._db import connect_kwargs

        db = self.runs.db
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    db.dsn, autocommit=True, **connect_kwargs(db.schema)
                ) as conn:
                    await conn.execute(f"LISTEN {_store.STOP_CHANNEL}")
                    while True:
                        await self._poll_stops()
                        async for note in conn.notifies(timeout=1.0):
                            if note.payload.startswith("stop:") and note.payload[5:] in self._running:
                                await self._poll_stops()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("stop listener: %s; reconnecting", exc)
                await asyncio.sleep(1.0)

    async def _poll_stops(self) -> None:
        if not self._running:
            return
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "SELECT run_id, stop FROM plait_run WHERE run_id = ANY(%s) AND stop IS NOT NULL",
                (list(self._running),),
            )
            for run_id, stop in await cur.fetchall():
                handle = self._running.get(run_id)
                if handle is None:
                    continue
                if stop == "cancel":
                    handle.stop_now = "cancel"
                    handle.now.set()
                else:
                    handle.stop = handle.stop or stop

    # -- periodic jobs --------------------------------------------------------------------------

    async def _sweep(self, timestamp: int) -> None:
        """Give the runs of dead workers (no heartbeat for ``stalled_after``) to live ones."""
        manager = self._app.job_manager
        stalled = await manager.get_stalled_jobs(seconds_since_heartbeat=self.settings.stalled_after)
        for job in stalled:
            log.info("resuming %s of a worker that stopped heartbeating", job.call_string)
            await manager.retry_job(job)
        await manager.prune_stalled_workers(self.settings.stalled_after)

    async def _tick(self, timestamp: int) -> None:
        await fire_due(self.runs, timestamp)

    # -- one run --------------------------------------------------------------------------------

    def _graph(self, name: str, namespace: str) -> CompiledGraph:
        key = (name, namespace)
        found = self._bound.get(key)
        if found is None:
            app = self.graphs.get(name)
            if app is None:
                raise UnknownGraphError(name, sorted(self.graphs), self.name)
            found = self._bound[key] = app.bind(checkpointer=self._checkpointer, namespace=namespace)
            # set up by arun: else each run's bind(hooks=...) would run a migration transaction
            found._setup_done = True
        return found

    async def _advance(self, context: Any, run_id: str) -> None:
        job = context.job
        claimed = self._claims.take(job.id)
        if claimed is not None and not self._stopping:
            await self._claimed(run_id, job.id, claimed)
            return
        if claimed is not None:  # claimed as the worker began to stop: it goes on elsewhere
            await self._put_back(run_id)
            raise Requeue(0.0)
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            found = await _store.get_run(cur, run_id)
            if found is None or found[0].done:
                return
            run, extra = found
            if extra["stop"] == "cancel":
                await self._finish(cur, run_id, "cancelled", error={"type": "Cancelled", "message": "cancelled"})
                return
            if extra["stop"] == "discard":  # cancelled with rollback before it wrote anything
                await cur.execute("DELETE FROM plait_run WHERE run_id = %s", (run_id,))
                self._notifier.send("end", run_id)
                return
            if extra["stop"] in ("interrupt", "rollback"):
                why = {"type": "Interrupted", "message": f"stopped by a newer run ({extra['stop']})"}
                await self._finish(cur, run_id, "interrupted", error=why)
                return
            try:
                graph = self._graph(run.graph, run.namespace)
            except UnknownGraphError as exc:
                await self._finish(cur, run_id, "error", error=_error(exc))
                return
        handle = self._running[run_id] = Handle(run_id, job=job.id)
        try:
            if self._stopping:
                raise Requeue(0.0)
            assert self._checkpointer is not None and self._limits is not None
            if extra["rollback_of"] and not extra["started"]:
                await self._roll_back(run, extra["rollback_of"])
            async with self._limits.admitted(run.graph):
                await self._attempt(run, extra, graph, handle, job.id)
        finally:
            self._running.pop(run_id, None)

    async def _claimable(self) -> list[str]:
        """The graphs whose runs are claimed with their job's fetch (:class:`Claims`): the unlimited ones."""
        if self._stopping:
            return []
        assert self._limits is not None
        limited = await self._limits.limited(self._names)
        return [g for g in self.graphs if g not in limited]

    async def _claimed(self, run_id: str, job: int, found: tuple[Run, dict[str, Any]]) -> None:
        """The short way into a run, and the usual one: the run was claimed with its job's fetch (:class:`Claims`:
        marked running and read by the same statement); run it. A run that was not (stopped, rolling back, a
        graph with a limit or unknown here, ended) takes the long way, :meth:`_advance`'s, reading it first."""
        owner = f"{self.name}/job-{job}"
        handle = self._running[run_id] = Handle(run_id, job=job)
        try:
            run, extra = found
            try:
                graph = self._graph(run.graph, run.namespace)
            except Exception as exc:  # a graph object the worker cannot bind: the run cannot run here
                async with self.runs.db.connection() as conn, conn.cursor() as cur:
                    await self._finish(cur, run_id, "error", error=_error(exc))
                return
            assert run.started_at is not None
            await self._execute(run, extra, graph, handle, owner, run.started_at)
        finally:
            self._running.pop(run_id, None)

    async def _roll_back(self, run: Any, stopped: Sequence[str]) -> None:
        assert self._checkpointer is not None
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "SELECT start_checkpoint FROM plait_run WHERE run_id = ANY(%s) AND started ORDER BY seq LIMIT 1",
                (list(stopped),),
            )
            row = await cur.fetchone()
        if row is not None:  # a start of None: the stopped run began a new thread, which goes back to empty
            dropped = await rewind(self._checkpointer, run.thread_id, run.namespace, row[0])
            to = f"checkpoint {row[0]}" if row[0] else "its start (the stopped run began the thread: none of it stays)"
            log.info(
                "run %s rolled thread %r back to %s (%d checkpoints dropped)", run.run_id, run.thread_id, to, dropped
            )

    async def _attempt(self, run: Run, extra: dict[str, Any], graph: CompiledGraph, handle: Handle, job: int) -> None:
        """The long way's attempt: mark the run running, run it."""
        owner = f"{self.name}/job-{job}"
        now = time.time()  # the attempt starts here, once admitted (a rate limit's token taken)
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "UPDATE plait_run SET status = 'running', attempts = attempts + 1, worker = %s, "
                "started_at = coalesce(started_at, %s), updated_at = %s "
                "WHERE run_id = %s AND status IN ('pending', 'running') "
                "RETURNING started_at, start_checkpoint, attempts, started, span",
                (owner, now, now, run.run_id),
            )
            row = await cur.fetchone()
        if row is None:
            return  # it ended meanwhile (cancelled)
        started_at, start, attempts, started, span = row
        run = dataclasses.replace(run, attempts=attempts, start_checkpoint=start)
        await self._execute(run, {**extra, "started": started, "span": span}, graph, handle, owner, started_at)

    async def _execute(
        self,
        run: Run,
        extra: dict[str, Any],
        graph: CompiledGraph,
        handle: Handle,
        owner: str,
        started_at: float,
    ) -> None:
        """Run an attempt of a run marked running (``run`` as marked: its attempts counted);
        whether its input is still to apply is decided under the lease (:class:`Steering`)."""
        input, graph, events = prepared(run, graph, extra, self.runs, self._notifier, self._checkpointer)
        await events.open(extra.get("events"))
        events.add("status", {"status": "running", "worker": owner, "attempt": run.attempts})
        budget = None if run.timeout is None else run.timeout - (time.time() - started_at)
        steering = Steering(
            handle, events, functools.partial(self._record, _store.record_start, run.run_id),
            functools.partial(self._record, _store.record_span, run.run_id), extra["started"], run.start_checkpoint,
            wants_root(run), extra.get("span"), run.attempts,
            start_rider(self._checkpointer, run, owner, self.runs.db.schema) if not extra["started"] else lambda: False,
        )  # fmt: skip
        task = asyncio.create_task(drive(graph.bind(hooks=steering), run, input, owner, events))
        stopper = asyncio.create_task(handle.now.wait())
        try:
            done, _ = await asyncio.wait({task, stopper}, timeout=budget, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # Procrastinate aborts the job (a shutdown past its timeout)
            task.cancel()
            stopper.cancel()
            with contextlib.suppress(BaseException):
                await task
            await asyncio.shield(self._put_back(run.run_id))
            raise
        stopper.cancel()
        if task not in done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            why = handle.stop_now or "timeout"
            await self._after_stop(run, why, events)
            return
        try:
            output = task.result()
        except LeaseLostError as exc:
            if exc.taken_by is not None:  # another attempt (a worker that took this one for dead) owns it now
                log.warning("run %s lost its thread to another worker: %s", run.run_id, exc)
                return
            # nobody holds it: the lease row was lost (a database crash forgets leases, which are
            # taken without waiting for the disk) or given back; go on from the stored checkpoints
            log.warning("run %s lost its lease (%s); it goes back to the queue", run.run_id, exc)
            raise Requeue(0.2) from exc
        except ThreadBusyError as exc:  # another attempt holds the thread (a worker thought dead, still alive)
            raise Requeue(min(max(exc.expires_in, 0.05), 1.0)) from exc
        except (CheckpointNotFoundError, CheckpointCorruptError) as exc:
            # what is stored decides it, not the store's health: every attempt would fail the
            # same way (a run with no input on a thread nothing started, a damaged record)
            await self._end(run, "error", events, error=_error(exc))
            return
        except Exception as exc:
            # the store failed, or the run queue's own statements did (recording where the run starts,
            # storing its stream items): the run is not at fault, it goes on once the database is back
            if isinstance(exc, CheckpointError) or database_failure(exc):
                log.warning("run %s: the database failed (%s); it goes back to the queue", run.run_id, exc)
                with contextlib.suppress(Exception):  # the database may be down: the retry finds it running
                    await self._put_back(run.run_id)
                raise Requeue(1.0) from exc
            await self._end(run, "error", events, error=_error(exc))
            return
        ended = steering.result
        if ended is not None and ended.status == "stopped":
            await self._after_stop(run, handle.stop or "shutdown", events)
            return
        if ended is not None and ended.status == "interrupted":
            output.setdefault(INTERRUPT_KEY, [])  # a breakpoint: paused with no interrupt to answer
            await self._end(run, "interrupted", events, output=output)
            return
        await self._end(run, "success", events, output=output)

    async def _after_stop(self, run: Any, why: str, events: Events) -> None:
        if why == "shutdown":
            await self._put_back(run.run_id)
            events.add("status", {"status": "pending", "reason": "the worker shut down; the run goes on elsewhere"})
            await events.flush()
            raise Requeue(0.0)
        if why == "cancel":
            await self._end(run, "cancelled", events, error={"type": "Cancelled", "message": "cancelled while running"})
        elif why == "timeout":
            message = f"the run took longer than its timeout of {run.timeout:g}s"
            await self._end(run, "timeout", events, error={"type": "Timeout", "message": message})
        elif why == "discard":  # cancelled with rollback: what it wrote goes, and the run with it
            await events.drain()
            assert self._checkpointer is not None
            async with self.runs.db.connection() as conn, conn.cursor() as cur:  # let go before rewind: same pool
                await cur.execute("SELECT started, start_checkpoint FROM plait_run WHERE run_id = %s", (run.run_id,))
                row = await cur.fetchone()
            if row is not None and row[0]:  # where it started, as recorded under the lease
                await rewind(self._checkpointer, run.thread_id, run.namespace, row[1])
            await drop_temporary(run, self._checkpointer)
            await self._record(lambda cur: cur.execute("DELETE FROM plait_run WHERE run_id = %s", (run.run_id,)))
            self._notifier.send("end", run.run_id)
        elif why == "interrupt" and run.options and "wire" in run.options:
            message = "cancelled at a super-step boundary (interrupt)"
            await self._end(run, "interrupted", events, error={"type": "Cancelled", "message": message})
        else:
            message = f"stopped at a super-step boundary by a newer run on the thread ({why})"
            await self._end(run, "interrupted", events, error={"type": "Interrupted", "message": message})

    async def _end(self, run: Any, status: str, events: Events, *, output: Any = None, error: Any = None) -> None:
        """Record how the run ended. When that fails (the database went away), the job is queued again: its
        next attempt finds the thread finished and records it then."""
        events.add("status", {"status": status, "error": error})
        await events.drain()  # what is being stored comes before what the end stores
        try:
            assert self._checkpointer is not None
            await drop_temporary(run, self._checkpointer)
            handle = self._running.get(run.run_id)  # its job goes with the end (EndedJobs)
            job = None if handle is None else handle.job
            async with self.runs.db.connection() as conn, conn.cursor() as cur:
                await self._finish(
                    cur, run.run_id, status, job, output=output, error=error, only_if=("running",), events=events.take()
                )
        except Exception as exc:
            log.warning("run %s ended %s but that could not be recorded (%s); it is retried", run.run_id, status, exc)
            raise Requeue(1.0) from exc

    async def _finish(self, cur: Any, run_id: str, status: str, job: int | None = None, **fields: Any) -> None:
        """:func:`_store.finish_job`, then announce what it stored."""
        ended, gone = await _store.finish_job(cur, run_id, status, job, **fields)
        if gone and job is not None:
            self._ended.add(job)
        if fields.get("events"):
            self._notifier.send("event", run_id)
        if ended:
            self._notifier.send("end", run_id)

    async def _record(self, statement: Callable[..., Awaitable[None]], *args: Any) -> None:
        """One of :mod:`_store`'s statements on a connection of the pool."""
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await statement(cur, *args)

    async def _put_back(self, run_id: str) -> None:
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "UPDATE plait_run SET status = 'pending', updated_at = %s WHERE run_id = %s AND status = 'running'",
                (time.time(), run_id),
            )


def _error(exc: BaseException) -> dict[str, Any]:  # cause: the node's own exception class
    return {"type": type(exc).__name__, "message": str(exc), "cause": error_name(exc)}
