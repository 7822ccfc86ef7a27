"""The change feed: which threads changed, as they change, whichever process changed them.

:meth:`Checkpointer.achanges <plait.checkpoint.base.Checkpointer.achanges>` returns a
:class:`ChangeFeed`, an async iterator of :class:`ThreadChange` records. It is what the
Studio's live pages, ``plait watch`` and the server's streams wait on: "wake me when thread
T changes", on any backend, without knowing which one.

The contract every feed keeps (``tests/checkpoint/test_feed.py`` runs it on every backend):

* **Nothing is lost.** Once :attr:`ChangeFeed.ready` is set, every commit, delete, prune,
  lease taken or lease given back on a thread, by any checkpointer in any process, is
  followed by at least one record naming that thread. Records are hints to look again, not a log: a feed may report a
  thread that did not change (a thread a run holds is reported at every change a feed sees,
  because its pending writes move nothing a feed reads cheaply), and changes of one thread
  that the consumer has not taken yet are folded into one record.
* **The consumer reads what changed.** A record names the thread, nothing more; what
  changed is read through the store, which is the truth.
* **Closing releases.** :meth:`ChangeFeed.aclose` (or leaving ``async with``) stops the
  feed, closes the connection it watches with, and ends the iteration.

How each backend notices (:attr:`ChangeFeed.mechanism`, and
:attr:`Capabilities.change_feed <plait.checkpoint.base.Capabilities.change_feed>` says
whether it is a real feed or the polling fallback):

* memory: an in-process notice from every write (:class:`Broadcast`);
* file: the thread and lease files' times and sizes, looked at every ``interval``;
* SQLite: ``PRAGMA data_version`` on a connection of its own, which moves when any other
  connection commits; then the thread rows that moved (:class:`RowTracker`);
* PostgreSQL: LISTEN/NOTIFY (a trigger the store adds on first use), then the thread rows
  that moved; without the right to add the trigger, those rows every ``interval``;
* any other backend: its listing, every ``interval`` (:class:`ListingFeed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from plait.checkpoint.model import CheckpointWrite, ThreadInfo, WritesBatch

__all__ = ["POLL", "SLACK", "THREAD_ROWS", "Broadcast", "ChangeFeed", "ListingFeed", "RowTracker", "ThreadChange"]

POLL = 0.5
"""Seconds between two looks of a feed that polls, unless the caller says otherwise."""

SLACK = 60.0
"""Seconds behind the newest ``updated_at`` seen that a look at the thread rows still reads.

Two writers stamp a row with their clock before their transactions commit, so a row can
appear with a time older than one already seen (PostgreSQL runs transactions side by side;
a SQLite writer may wait for the file's lock). Rows within this margin are compared with
what was seen of them, so such a row is still reported; rows older than it did not move."""

THREAD_ROWS = """SELECT t.ns, t.thread_id, t.gen, t.held, t.status, t.updated_at,
        (SELECT c.id FROM {P}checkpoints c WHERE c.ns = t.ns AND c.thread_id = t.thread_id
         ORDER BY c.id DESC LIMIT 1)
    FROM {P}threads t WHERE t.updated_at >= {since} OR t.held = 1"""
"""The SQL stores' thread rows a look compares (``{P}`` the table prefix, ``{since}`` the
parameter marker): those that moved lately, and those a run holds. Only a run that holds a
thread writes to it without moving its row's time, so nothing else can have changed; the
head id is read so that a store on a clock that stands still (tests) is seen too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadChange:
    """Thread ``thread_id`` of ``namespace`` changed: look at it again."""

    namespace: str
    thread_id: str


_END = object()


class ChangeFeed(ABC):
    """An async iterator of :class:`ThreadChange` records, filtered to one namespace or one
    thread when asked; see the module docstring for the contract.

    It starts watching on the first ``async for``, :meth:`next`, :meth:`start` or ``async
    with``, on the running event loop, and must be used on that loop only. Waiting is
    cancel-safe: a :meth:`next` that times out loses nothing. Once closed, iteration ends.
    """

    def __init__(self, *, mechanism: str, namespace: str | None = None, thread_id: str | None = None) -> None:
        self.mechanism = mechanism
        """How it notices: ``"in-process"``, ``"file times"``, ``"sqlite data_version"``,
        ``"postgres listen/notify"`` or ``"polling"`` (it may fall back to polling once
        started, and then says so here)."""
        self.ready = asyncio.Event()
        """Set once it watches: every change after that is reported."""
        self.interval: float | None = None
        """Seconds between two looks where it polls; None where it waits for notices."""
        self.namespace = namespace
        self.thread_id = thread_id
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queued: set[ThreadChange] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @abstractmethod
    async def _watch(self) -> None:
        """Watch the store until cancelled: :meth:`_emit` what changed, set :attr:`ready`
        once watching; release what it holds when cancelled."""

    def _emit(self, changes: Iterable[ThreadChange]) -> None:
        """Queue the records the consumer asked for (on the feed's loop)."""
        for change in changes:
            if self.namespace is not None and change.namespace != self.namespace:
                continue
            if self.thread_id is not None and change.thread_id != self.thread_id:
                continue
            if change not in self._queued:  # folded: the consumer reads the thread anyway
                self._queued.add(change)
                self._queue.put_nowait(change)

    def _emit_threadsafe(self, changes: Sequence[ThreadChange]) -> None:
        """:meth:`_emit` from any thread; dropped once the feed's loop is gone."""
        loop = self._loop
        if loop is None or self._closed:
            return
        with contextlib.suppress(RuntimeError):  # the loop was closed without closing the feed
            loop.call_soon_threadsafe(self._emit, changes)

    def _started(self) -> None:
        if self._task is None and not self._closed:
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._watch()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # raised to the consumer by its next wait
            self._queue.put_nowait(exc)
        else:
            self._queue.put_nowait(_END)

    async def start(self) -> None:
        """Start watching and wait until :attr:`ready` (or the feed failed)."""
        self._started()
        if self._task is None:  # closed
            return
        ready = asyncio.ensure_future(self.ready.wait())
        try:
            await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if not self.ready.is_set():
            await self.next(0)  # raises the failure

    def __aiter__(self) -> ChangeFeed:
        return self

    async def __anext__(self) -> ThreadChange:
        self._started()
        item = await self._queue.get()
        return self._taken(item)

    def _taken(self, item: Any) -> ThreadChange:
        if item is _END:
            self._queue.put_nowait(_END)
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            raise item
        self._queued.discard(item)
        return item  # type: ignore[no-any-return]

    async def next(self, timeout: float | None = None) -> ThreadChange | None:
        """The next record; None when none came within ``timeout`` seconds, or the feed was
        closed. Raises what made the feed fail."""
        self._started()
        try:
            if not self._queue.empty():
                return self._taken(self._queue.get_nowait())
            if timeout is not None and timeout <= 0:
                return None
            async with asyncio.timeout(timeout):
                return await self.__anext__()
        except (TimeoutError, StopAsyncIteration):
            return None

    async def aclose(self) -> None:
        """Stop watching and release the connection or file it watched with."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._queue.empty():  # what nobody will read any more
            self._queue.get_nowait()
        self._queued.clear()
        self._queue.put_nowait(_END)

    async def __aenter__(self) -> ChangeFeed:
        self._started()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Broadcast:
    """The in-process notice of a store whose writes all go through one object (memory):
    every write calls :meth:`changed`, and each open feed of the store hears it."""

    def __init__(self) -> None:
        self._feeds: weakref.WeakSet[BroadcastFeed] = weakref.WeakSet()
        self._lock = threading.Lock()

    def changed(self, namespace: str, thread_id: str) -> None:
        """Tell every open feed that the thread changed (from any thread; cheap when none)."""
        if self._feeds:
            self._send((ThreadChange(namespace=namespace, thread_id=thread_id),))

    def committed(self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch]) -> None:
        """Tell every open feed about each thread a commit wrote to."""
        if self._feeds:
            keys = {(cw.checkpoint.namespace, cw.checkpoint.thread_id) for cw in checkpoints}
            keys.update((batch.namespace, batch.thread_id) for batch in writes)
            self._send(tuple(ThreadChange(namespace=ns, thread_id=t) for ns, t in sorted(keys)))

    def _send(self, changes: Sequence[ThreadChange]) -> None:
        with self._lock:
            feeds = list(self._feeds)
        for feed in feeds:
            feed._emit_threadsafe(changes)

    def feed(self, *, namespace: str | None = None, thread_id: str | None = None) -> ChangeFeed:
        """A feed of this store's changes from its start on."""
        return BroadcastFeed(self, namespace=namespace, thread_id=thread_id)

    def _add(self, feed: BroadcastFeed) -> None:
        with self._lock:
            self._feeds.add(feed)

    def _remove(self, feed: BroadcastFeed) -> None:
        with self._lock:
            self._feeds.discard(feed)


class BroadcastFeed(ChangeFeed):
    """A feed fed by a :class:`Broadcast`."""

    def __init__(self, broadcast: Broadcast, *, namespace: str | None, thread_id: str | None) -> None:
        super().__init__(mechanism="in-process", namespace=namespace, thread_id=thread_id)
        self._broadcast = broadcast

    async def _watch(self) -> None:
        self._broadcast._add(self)
        self.ready.set()
        try:
            await asyncio.Future()  # until cancelled: the broadcast does the work
        finally:
            self._broadcast._remove(self)


Row = tuple[str, str, int, int, str, float, str | None]
"""A thread row as :data:`THREAD_ROWS` reads it: ns, thread_id, gen, held, status,
updated_at, head id."""


class RowTracker:
    """Which threads changed, from looks at their rows (see :data:`THREAD_ROWS`).

    A row is reported when it is new to the window, when it differs from what the last look
    saw, or while a run holds it. The first look only records what is there.
    """

    def __init__(self, slack: float = SLACK) -> None:
        self.slack = slack
        self._seen: dict[tuple[str, str], Row] = {}
        self._newest: float | None = None
        self.primed = False

    @property
    def since(self) -> float:
        """The oldest ``updated_at`` the next look must read."""
        return float("-inf") if self._newest is None else self._newest - self.slack

    def look(self, rows: Iterable[Sequence[Any]]) -> list[ThreadChange]:
        """The threads that changed since the last look (none on the first)."""
        changed: list[ThreadChange] = []
        seen: dict[tuple[str, str], Row] = {}
        for raw in rows:
            row: Row = (str(raw[0]), str(raw[1]), int(raw[2]), int(raw[3]), str(raw[4]), float(raw[5]), raw[6])
            key = (row[0], row[1])
            seen[key] = row
            if self._newest is None or row[5] > self._newest:
                self._newest = row[5]
            if self.primed and (row[3] or self._seen.get(key) != row):
                changed.append(ThreadChange(namespace=key[0], thread_id=key[1]))
        self._seen = seen
        self.primed = True
        return changed


class ListingFeed(ChangeFeed):
    """The fallback of a backend without a feed of its own: its whole listing, every
    ``interval`` seconds, compared with the last. A thread a run holds is reported at every
    look (its pending writes change nothing listed); a thread gone from the listing is
    reported once. It costs one listing of every thread per look."""

    PAGE = 500

    def __init__(
        self,
        list_threads: Callable[[int, str | None], Awaitable[list[ThreadInfo]]],
        *,
        interval: float | None = None,
        namespace: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(mechanism="polling", namespace=namespace, thread_id=thread_id)
        self._list = list_threads
        self.interval: float = POLL if interval is None else interval

    async def _listing(self) -> dict[tuple[str, str], tuple[Any, ...]]:
        out: dict[tuple[str, str], tuple[Any, ...]] = {}
        before: str | None = None
        while True:
            page = await self._list(self.PAGE, before)
            for t in page:
                lease = (t.lease.token, t.lease.expires_at) if t.lease is not None else None
                out[(t.namespace, t.thread_id)] = (t.head_id, t.status, t.updated_at, t.checkpoints, lease)
            if len(page) < self.PAGE:
                return out
            before = page[-1].cursor

    async def _watch(self) -> None:
        last = await self._listing()
        self.ready.set()
        while True:
            await asyncio.sleep(self.interval)
            now = await self._listing()
            keys = {k for k, v in now.items() if v[1] == "busy" or last.get(k) != v} | (last.keys() - now.keys())
            self._emit(ThreadChange(namespace=ns, thread_id=t) for ns, t in sorted(keys))
            last = now
