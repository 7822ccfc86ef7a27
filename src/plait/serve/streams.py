"""A run's stream: every event stored before it is sent, and read back by any client.

:class:`EventWriter` takes the events a run makes (on the event loop, never blocking it),
stores them in batches in the run log and then wakes the readers; :func:`follow` is what a
reader does: read what is stored after the last id it has, wait for more while the run is
active, and end when the run has ended and nothing is left. A client that reconnects with
``Last-Event-ID`` reads from the log the same way, so it gets every later event once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from plait.serve.log import LocalRunLog, RunLog
from plait.serve.records import StoredEvent
from plait.serve.wire import dumps

__all__ = ["EventWriter", "Notifier", "follow", "sse_frame", "thread_key"]

HEARTBEAT = 10.0
"""Seconds of silence after which a reader sends a comment line, so that proxies and the
SDKs' timeouts see the connection alive."""


def thread_key(thread_id: str) -> str:
    """The :class:`Notifier` key of a thread's new runs (a run's own key is its id): what a
    thread's stream waits on between runs."""
    return f"thread:{thread_id}"


class Notifier:
    """Wakes the readers of a run when something of it was stored (events, its end). A
    reader registers before it reads, so a notice between its read and its wait is kept.
    A notice may carry what was stored (the server's own runner hands the record of a run
    that ended to whoever waits for it, so that they need not read it back)."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[asyncio.Future[Any]]] = {}
        self.readers: dict[str, int] = {}
        """How many streams read each run's events now (:func:`follow`)."""
        self.writers: dict[str, Callable[[], None]] = {}
        """What stores a run's queued events at once, for the runs that have any (see
        :meth:`EventWriter.add`): called when a stream starts reading the run."""

    def reading(self, run_id: str, delta: int) -> None:
        """A stream of ``run_id`` starts (``delta`` 1) or stops (-1) reading its events."""
        count = self.readers.get(run_id, 0) + delta
        if count > 0:
            self.readers[run_id] = count
        else:
            self.readers.pop(run_id, None)
        store = self.writers.get(run_id) if delta > 0 else None
        if store is not None:
            store()

    def notify(self, run_id: str, value: Any = None) -> None:
        for fut in self.waiters.pop(run_id, ()):
            if not fut.done():
                fut.set_result(value)

    def register(self, run_id: str) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(run_id, set()).add(fut)
        return fut

    def discard(self, run_id: str, fut: asyncio.Future[Any]) -> None:
        waiting = self.waiters.get(run_id)
        if waiting is not None:
            waiting.discard(fut)
            if not waiting:
                del self.waiters[run_id]

    async def wait(self, run_id: str, timeout: float) -> bool:
        """Whether :meth:`notify` was called for ``run_id`` within ``timeout``."""
        fut = self.register(run_id)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self.discard(run_id, fut)


class EventWriter:
    """The events of one attempt of a run: :meth:`add` encodes and queues an event at once;
    a single flusher stores what is queued (one transaction a batch) and wakes the readers,
    so a chunk is sent after it is stored and the run is never held up by the store. The
    first chunk of a streamed answer (a ``messages`` event while nothing is being stored)
    goes to the log before :meth:`add` returns (see :meth:`LocalRunLog.append_events_now`)."""

    def __init__(
        self, log: LocalRunLog, run_id: str, notifier: Notifier, clock: Callable[[], float] = time.time
    ) -> None:
        self.log = log
        self.run_id = run_id
        self.notifier = notifier
        self.clock = clock
        self.queued: list[tuple[str, bytes]] = []
        self.flusher: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None

    def add(self, event: str, data: Any) -> None:
        """Queue an event. It is stored at once when a stream reads the run (a streamed
        answer's chunks always); otherwise at the run's next super-step or with its end (the
        runner flushes then, see ``_Steer``), one transaction fewer a run for a client that
        only waits for the result; a stream that starts reading meanwhile has it stored."""
        self.queued.append((event, dumps(data)))
        if self.flusher is None or self.flusher.done():
            if event != "messages" and self.run_id not in self.notifier.readers:
                self.notifier.writers[self.run_id] = self._store_now
                return
            first = None
            if event == "messages":  # a streamed answer: what is queued goes to the log now
                batch, self.queued = self.queued, []
                storing = self.log.append_events_now(self.run_id, batch, self.clock())
                if isinstance(storing, int):  # stored already: its readers are woken at once
                    self.notifier.notify(self.run_id, stored(batch, storing))
                else:
                    first = (batch, storing)
            # what is added after this, in this turn of the loop, is stored in one batch
            self.flusher = asyncio.get_running_loop().create_task(self._flush_all(first))

    def _store_now(self) -> None:
        """Store what is queued (a stream started reading the run)."""
        self.notifier.writers.pop(self.run_id, None)
        if self.queued and (self.flusher is None or self.flusher.done()):
            self.flusher = asyncio.get_running_loop().create_task(self._flush_all())

    async def _flush_all(self, first: tuple[list[tuple[str, bytes]], Awaitable[int]] | None = None) -> None:
        if first is not None and not await self._stored(*first):
            return
        while self.queued:
            batch, self.queued = self.queued, []
            if not await self._stored(batch, self.log.append_events(self.run_id, batch, self.clock())):
                return

    async def _stored(self, batch: list[tuple[str, bytes]], storing: Awaitable[int]) -> bool:
        """Wait for ``batch`` to be stored, then wake its readers; False if storing failed
        (kept: the run sees it at its next flush)."""
        try:
            last = await storing
        except Exception as exc:
            self.failure = exc
            return False
        self.notifier.notify(self.run_id, stored(batch, last))
        return True

    async def drain(self) -> list[tuple[str, bytes]]:
        """Wait until no batch is being stored, then take what is queued: the last events,
        which the caller stores in the transaction that records the run's end (raises what
        storing an earlier batch raised)."""
        while self.flusher is not None and not self.flusher.done():
            await asyncio.shield(self.flusher)
        if self.failure is not None:
            raise self.failure
        batch, self.queued = self.queued, []
        self.notifier.writers.pop(self.run_id, None)
        return batch

    async def flush(self) -> None:
        """Wait until every event added so far is stored (raises what storing raised)."""
        while self.flusher is not None and not self.flusher.done():
            await asyncio.shield(self.flusher)
        if self.queued and self.failure is None:
            await self._flush_all()
        if self.failure is not None:
            raise self.failure


def stored(batch: Sequence[tuple[str, bytes]], last: int) -> list[StoredEvent]:
    """``batch`` as the log stored it, its last event numbered ``last``: what a notice hands
    the readers that are waiting for it, so that they need not read it back."""
    first = last - len(batch) + 1
    return [StoredEvent(first + i, name, data) for i, (name, data) in enumerate(batch)]


def sse_frame(event: StoredEvent | None = None, *, name: str = "", data: bytes = b"", with_id: bool = True) -> bytes:
    """One SSE message: ``id``, ``event`` and one ``data`` line (JSON has no raw newlines)."""
    if event is not None:
        head = f"id: {event.seq}\nevent: {event.event}\n" if with_id else f"event: {event.event}\n"
        return head.encode() + b"data: " + event.data + b"\n\n"
    return f"event: {name}\n".encode() + b"data: " + data + b"\n\n"


async def follow(
    log: RunLog,
    notifier: Notifier,
    run_id: str,
    after: int,
    is_active: Callable[[], Awaitable[bool]],
    *,
    heartbeat: float = HEARTBEAT,
) -> AsyncGenerator[StoredEvent | None, None]:
    """The run's events after ``after``, as they are stored; None when nothing came for
    ``heartbeat`` seconds (send a heartbeat). Ends once the run has ended and every event is
    read. A batch handed over by the notice that woke the reader is used as it is when it
    follows on from ``after``; anything else (a reader that fell behind, a rejoin) reads the
    log, so no event is skipped or sent twice."""
    notifier.reading(run_id, 1)
    try:
        async with contextlib.aclosing(_follow(log, notifier, run_id, after, is_active, heartbeat)) as events:
            async for event in events:
                yield event
    finally:
        notifier.reading(run_id, -1)


async def _follow(
    log: RunLog,
    notifier: Notifier,
    run_id: str,
    after: int,
    is_active: Callable[[], Awaitable[bool]],
    heartbeat: float,
) -> AsyncGenerator[StoredEvent | None, None]:
    ended = False
    handed: list[StoredEvent] = []
    while True:
        fut = notifier.register(run_id)
        try:
            if handed and handed[0].seq == after + 1:
                events = handed
            else:
                events = await log.read_events(run_id, after)
            handed = []
            if not events:
                if ended:
                    return
                if not await is_active():
                    ended = True  # one more read: what was stored before it ended
                    continue
                try:
                    told = await asyncio.wait_for(fut, heartbeat)
                except TimeoutError:
                    yield None
                    continue
                if isinstance(told, list):
                    handed = told
                continue
        finally:
            notifier.discard(run_id, fut)
        for event in events:
            after = event.seq
            yield event
