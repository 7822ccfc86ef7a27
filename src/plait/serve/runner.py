"""Runs of the API executed in the server's own process (SQLite, file and memory stores).

The run model is :mod:`plait.runs`' (statuses, the four multitask strategies, cancel with
``interrupt`` or ``rollback``), kept in the run log instead of a job queue: a run is stored
``pending`` before the request that made it is answered, each thread's runs go one at a
time in the order they were made, and a server started again runs what was pending or
running when it stopped. A retried run never applies its input twice: its first attempt
records the thread's head before it writes, and a later attempt that finds the head moved
continues the thread instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint
from plait.checkpoint.rewind import rewind
from plait.engine.options import RunHooks, RunResult
from plait.errors import AssistantNotFoundError, RunNotFoundError, RunRejectedError
from plait.graph.api_state import checkpoint_events
from plait.graph.compiled import CompiledGraph
from plait.serve.assistants import Assistants
from plait.serve.log import LocalRunLog
from plait.serve.records import ApiRunStatus, RunRecord
from plait.serve.requests import start_of
from plait.serve.streams import EventWriter, Notifier, stored
from plait.serve.wire import dumps, interrupt_json
from plait.stream_wire import Translator, api_error, library_modes
from plait.tracing import carrier
from plait.tracing import hooks as tracing

__all__ = ["Runner"]

log = logging.getLogger("plait.serve")


class _Steer(RunHooks):
    """One attempt's hooks: stored events are flushed at each super-step boundary, where a
    cancel asked for stops the run."""

    def __init__(self, runner: Runner, run_id: str, writer: EventWriter) -> None:
        self.runner = runner
        self.run_id = run_id
        self.writer = writer
        self.result: RunResult | None = None

    async def at_step(self, checkpoint: Checkpoint) -> bool:
        await self.writer.flush()
        return self.run_id in self.runner.stops

    def on_finish(self, result: RunResult) -> None:
        self.result = result


class Runner:
    """Executes the API's runs on ``checkpointer``, one at a time per thread."""

    def __init__(
        self,
        log: LocalRunLog,
        checkpointer: Checkpointer,
        assistants: Assistants,
        notifier: Notifier,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log = log
        self.checkpointer = checkpointer
        self.assistants = assistants
        self.notifier = notifier
        self.clock = clock
        self.locks: dict[str, asyncio.Lock] = {}
        self.drivers: dict[str, asyncio.Task[None]] = {}
        self.current: dict[str, str] = {}
        """thread id -> the run executing on it."""
        self.stops: dict[str, str] = {}
        """run id -> the cancel asked for (``interrupt`` or ``rollback``), until carried out."""
        self.wakes: dict[str, asyncio.Event] = {}
        self.live: dict[str, str] = {}
        """run id -> thread id of the runs made or picked up by this process that have not
        ended: every end of one goes through :meth:`_ended`, so a waiter on one of them is
        told and need not read, and a thread with none has nothing left to execute."""
        self.live_threads: dict[str, int] = {}
        """thread id -> how many of :attr:`live` are its."""
        self.closing = False

    def lock(self, thread_id: str) -> asyncio.Lock:
        return self.locks.setdefault(thread_id, asyncio.Lock())

    async def start(self) -> None:
        """Pick up what a previous server left: every pending or running run, in order."""
        unfinished = await self.log.unfinished_runs()
        for r in unfinished:
            self._live(r)
        for thread_id in dict.fromkeys(r.thread_id for r in unfinished):
            self.kick(thread_id)

    async def close(self) -> None:
        """Stop executing: runs cut off stay ``running`` in the log and run again when a server
        starts on the same store."""
        self.closing = True
        tasks = list(self.drivers.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- making and stopping runs -------------------------------------------------------------

    async def create(self, record: RunRecord, *, thread_tags: Mapping[str, Any] | None = None) -> RunRecord:
        """Store ``record`` (pending) under its thread's strategy, ``thread_tags`` merged into
        its thread's metadata in the same transaction, and have it executed.

        Raises:
            RunRejectedError: ``multitask="reject"`` and the thread has an active run.
        """
        async with self.lock(record.thread_id):
            # A thread with no live run here most often starts the new run at once: its head
            # is read meanwhile, on the store's reader thread, while the log stores the run.
            head = None
            if record.thread_id not in self.live_threads and not record.kwargs.get("after"):
                head = asyncio.ensure_future(self.checkpointer.aget(record.thread_id))
            reject = record.multitask == "reject"
            try:
                active = await self.log.insert_run(record, tags=thread_tags, reject=reject)
            except BaseException:
                _drop(head)
                raise
            if active:
                _drop(head)
                head = None
            if active and reject:
                raise RunRejectedError(record.thread_id, active[0].run_id, active[0].status)
            self._live(record)
            if record.multitask in ("interrupt", "rollback"):
                for other in active:
                    await self._stop(other, record.multitask)
        self.kick(record.thread_id, first=None if active else record, head=head)
        return record

    async def cancel(self, run_id: str, action: str) -> RunRecord:
        run = await self.log.get_run(run_id)
        if run is None:
            raise RunNotFoundError(run_id)
        async with self.lock(run.thread_id):
            run = await self.log.get_run(run_id)
            if run is None:
                raise RunNotFoundError(run_id)
            if not run.done:
                await self._stop(run, action)
        return run

    async def _stop(self, run: RunRecord, action: str) -> None:
        """Stop ``run``: at its next super-step boundary when it executes, at once when it
        waits (then it never starts); ``rollback`` also drops what it wrote (and the run)."""
        if self.current.get(run.thread_id) == run.run_id:
            self.stops[run.run_id] = action
            return
        if action == "rollback":
            await self.log.delete_run(run.run_id)
            self._ended(run.run_id, None)
        else:
            error = {"error": "Cancelled", "message": "cancelled before it ran"}
            self._ended(run.run_id, await self._save(run, status="interrupted", error=error))

    def _live(self, run: RunRecord) -> None:
        if run.run_id not in self.live:
            self.live[run.run_id] = run.thread_id
            self.live_threads[run.thread_id] = self.live_threads.get(run.thread_id, 0) + 1

    def _ended(self, run_id: str, record: RunRecord | None) -> None:
        """``run_id`` ended (``record``, as stored) or was rolled back (None): tell its waiters."""
        thread_id = self.live.pop(run_id, None)
        if thread_id is not None:
            left = self.live_threads[thread_id] - 1
            if left:
                self.live_threads[thread_id] = left
            else:
                del self.live_threads[thread_id]
        self.notifier.notify(run_id, record)

    async def join(self, run_id: str) -> RunRecord:
        """Wait until the run has ended (or was rolled back: then raises RunNotFoundError).
        A run of this process's is not read while it is live: its end is handed over by
        :meth:`_ended`; others (and every wait that times out) read the log."""
        read = run_id not in self.live
        while True:
            fut = self.notifier.register(run_id)
            try:
                if read:
                    run = await self.log.get_run(run_id)
                    if run is None:
                        raise RunNotFoundError(run_id)
                    if run.done:
                        return run
                try:
                    told = await asyncio.wait_for(fut, 5.0)
                except TimeoutError:
                    read = True
                    continue
                if isinstance(told, RunRecord) and told.done:
                    return told
                read = run_id not in self.live
            finally:
                self.notifier.discard(run_id, fut)

    async def is_active(self, run_id: str) -> bool:
        if run_id in self.live:
            return True
        run = await self.log.get_run(run_id)
        return run is not None and not run.done

    # -- executing ----------------------------------------------------------------------------

    def kick(
        self, thread_id: str, first: RunRecord | None = None, head: asyncio.Future[Checkpoint | None] | None = None
    ) -> None:
        """Make sure the thread's runs are being executed (and a waiting driver looks again).
        ``first``: the thread's only active run, just stored, which a new driver then starts
        without reading the log for it; ``head``: the thread's head, being read since before
        ``first`` was stored (a driver that does not start ``first`` drops it)."""
        wake = self.wakes.get(thread_id)
        if wake is not None:
            wake.set()
        if self.closing or thread_id in self.drivers:
            _drop(head)
            return
        self.drivers[thread_id] = asyncio.get_running_loop().create_task(self._drive(thread_id, first, head))

    async def _drive(
        self, thread_id: str, first: RunRecord | None = None, head: asyncio.Future[Checkpoint | None] | None = None
    ) -> None:
        try:
            while True:
                async with self.lock(thread_id):
                    if first is not None and first.run_id in self.live:  # (not cancelled meanwhile)
                        waiting = [first]
                    elif thread_id in self.live_threads:
                        _drop(head)
                        head = None
                        waiting = await self.log.active_runs(thread_id)
                    else:  # no live run of the thread: nothing to read (after each run's end, most often)
                        waiting = []
                    first = None
                    if not waiting:
                        for gone in [r for r, t in self.live.items() if t == thread_id]:  # deleted meanwhile
                            self._ended(gone, None)
                        del self.drivers[thread_id]
                        self.wakes.pop(thread_id, None)
                        _drop(head)
                        return
                    run = waiting[0]
                    due = float(run.kwargs.get("after") or 0.0)
                    if due <= self.clock():
                        self.current[thread_id] = run.run_id
                if due > self.clock():
                    wake = self.wakes.setdefault(thread_id, asyncio.Event())
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), due - self.clock())
                    continue
                try:
                    started, head = head, None
                    await self._execute(run, started)
                finally:
                    self.current.pop(thread_id, None)
                    self.stops.pop(run.run_id, None)
        except asyncio.CancelledError:
            self.drivers.pop(thread_id, None)
            raise
        except Exception:  # the log itself failed: leave the runs for the next start
            log.exception("executing the runs of thread %r failed", thread_id)
            self.drivers.pop(thread_id, None)

    async def _execute(self, run: RunRecord, head_read: asyncio.Future[Checkpoint | None] | None = None) -> None:
        try:
            assistant = self.assistants.find(run.graph)
        except AssistantNotFoundError as exc:  # stored by a server that served another graph set
            _drop(head_read)
            refusal = {"error": type(exc).__name__, "message": str(exc)}
            self._ended(run.run_id, await self._save(run, status="error", output={"__error__": refusal}, error=refusal))
            return
        head = await (head_read if head_read is not None else self.checkpointer.aget(run.thread_id))
        head_id = head.id if head is not None else None
        first = run.attempts == 0
        started = [("metadata", dumps({"run_id": run.run_id, "attempt": run.attempts + 1}))]
        run, seq = await self._save_with(  # with its first event, in one transaction
            run,
            started,
            status="running",
            attempts=run.attempts + 1,
            start_checkpoint=head_id if first else run.start_checkpoint,
        )
        self.notifier.notify(run.run_id, stored(started, seq))
        writer = EventWriter(self.log, run.run_id, self.notifier, self.clock)
        try:
            landed = not first and head_id != run.start_checkpoint
            status, output, error = await self._attempt(run, assistant.graph, writer, head_id, landed)
        except asyncio.CancelledError:
            raise  # the server is stopping: the run stays running and goes on at the next start
        except Exception as exc:
            status, error = "error", api_error(exc)
            output = {"__error__": error}
            writer.add("error", error)
        last = await writer.drain()  # stored with the run's end
        rollback = self.stops.get(run.run_id) == "rollback"
        if run.temporary:
            # a stateless run's thread: its state goes before the end is recorded, so that whoever
            # learns of the end finds it gone; the run itself stays readable
            await self.checkpointer.adelete_thread(run.thread_id)
        elif rollback:
            await rewind(self.checkpointer, run.thread_id, "", run.start_checkpoint)
        if rollback:
            await self.log.delete_run(run.run_id)
            await self.log.touch_thread(run.thread_id, self.clock())
            self._ended(run.run_id, None)
        else:  # touches the thread too
            self._ended(run.run_id, await self._save(run, status=status, output=output, error=error, events=last))

    async def _attempt(
        self, run: RunRecord, graph: CompiledGraph, writer: EventWriter, head_id: str | None, landed: bool
    ) -> tuple[ApiRunStatus, Any, dict[str, Any] | None]:
        """One attempt of ``run``, its stream items stored as events; how it ended."""
        kw = run.kwargs
        translator = Translator(kw.get("stream_mode") or ["values"], bool(kw.get("subgraphs")), run.thread_id)
        hooks = _Steer(self, run.run_id, writer)
        hooks.root = not run.temporary  # a new thread starts with its root (LangGraph's step -1)
        graph = graph.bind(checkpointer=self.checkpointer, hooks=hooks)
        if kw.get("interrupt_before") is not None or kw.get("interrupt_after") is not None:
            graph = graph.bind(
                interrupt_before=kw.get("interrupt_before") or graph.interrupt_before,
                interrupt_after=kw.get("interrupt_after") or graph.interrupt_after,
            )
        input, checkpoint_id = start_of(kw, head_id, landed=landed)
        traced = tracing.active is not None or graph.binding.tracing
        with carrier.continuing(kw.get("trace") if traced else None):
            return await self._stream(run, graph, hooks, translator, writer, input, checkpoint_id)

    async def _stream(
        self,
        run: RunRecord,
        graph: CompiledGraph,
        hooks: _Steer,
        translator: Translator,
        writer: EventWriter,
        input: Any,
        checkpoint_id: str | None,
    ) -> tuple[ApiRunStatus, Any, dict[str, Any] | None]:
        kw = run.kwargs
        stream = graph.astream(
            input,
            mode=list(library_modes(kw.get("stream_mode") or ["values"])),  # type: ignore[arg-type]
            subgraphs=True,
            thread_id=run.thread_id,
            checkpoint_id=checkpoint_id,
            context=kw.get("context"),
            metadata=self._metadata(run),
            durability=kw.get("durability") or "sync",
            recursion_limit=kw.get("recursion_limit") or 10_000,
            wait=30.0,
        )
        async for ns, mode, item in stream:
            if mode == "events" and translator.is_checkpoint(item):
                made = await checkpoint_events(translator, self.checkpointer, run.thread_id, "", ns, item)
            else:
                made = translator.events(ns, mode, item)
            for name, data in made:
                writer.add(name, data)
        result = hooks.result
        assert result is not None
        output: dict[str, Any] = dict(result.values)
        if result.interrupts:
            output["__interrupt__"] = [interrupt_json(i) for i in result.interrupts]
        if result.status == "stopped":
            action = self.stops.get(run.run_id, "interrupt")
            return "interrupted", output, {"error": "Cancelled", "message": f"cancelled ({action})"}
        return "success", output, None

    def _metadata(self, run: RunRecord) -> dict[str, Any]:
        user = run.metadata if isinstance(run.metadata, Mapping) else {}
        return {**user, "graph_id": run.graph, "assistant_id": run.assistant_id, "api_run_id": run.run_id}

    async def _save(self, run: RunRecord, events: Sequence[tuple[str, bytes]] = (), **changes: Any) -> RunRecord:
        return (await self._save_with(run, events, **changes))[0]

    async def _save_with(
        self, run: RunRecord, events: Sequence[tuple[str, bytes]], **changes: Any
    ) -> tuple[RunRecord, int]:
        """The run saved with ``changes`` and ``events`` appended, and the last event's number."""
        updated = dataclasses.replace(run, **changes, updated_at=self.clock())
        return updated, await self.log.save_run(updated, events)


def _drop(read: asyncio.Future[Any] | None) -> None:
    """Forget a read nobody will use (its failure, if any, is not reported as unretrieved)."""
    if read is not None:
        read.add_done_callback(lambda f: f.cancelled() or f.exception())
