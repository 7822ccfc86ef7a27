"""Live updates: noticing that the store changed, whichever process changed it.

A :class:`Watcher` wakes its listeners when the store may have changed; each SSE stream then
reads what it shows (a thread's head and status, the first page of threads) and sends an
event only when that differs from what it sent last. It listens to the store's change feed
(:meth:`~plait.checkpoint.base.Checkpointer.achanges`, whatever the backend): on SQLite
``PRAGMA data_version`` polled every 0.2 s on a connection of its own, on PostgreSQL
LISTEN/NOTIFY (polling when the role may not add the trigger), in memory a notice from each
write, on the file store the files' times every 0.5 s (see :mod:`plait.checkpoint.feed`).
A feed that fails leaves a tick every 0.5 s (the streams' own reads are the check).

Either way a checkpoint committed anywhere reaches an open page within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from plait.checkpoint.base import Checkpointer

log = logging.getLogger("plait.server")

__all__ = ["Watcher", "changes_of"]

TICK = 0.5
HEARTBEAT = 15.0
"""Seconds between SSE comments that keep an idle stream (and its proxies) open."""


class Watcher:
    """Wakes every listener when the store may have changed."""

    def __init__(self, checkpointer: Checkpointer, *, interval: float | None = None) -> None:
        self._feed = checkpointer.achanges(interval=interval)
        self.interval = self._feed.interval or (interval if interval is not None else TICK)
        """Seconds between two looks where the store's feed polls."""
        self.listening = asyncio.Event()
        """Set once the store's change feed watches (every later change wakes the listeners)."""
        self._failed = False
        self._generation = 0
        self._changed: asyncio.Event | None = None
        """Set (and replaced by a fresh one) at each wake-up. An Event, not a Condition:
        a wait that times out is cancelled, and a cancelled ``Condition.wait`` can leave its
        lock unreleased on Python 3.11, which would hang every later wake-up."""
        self._task: asyncio.Task[None] | None = None

    @property
    def mechanism(self) -> str:
        """How the store's changes are noticed (the feed's mechanism, or ``polling``)."""
        return "polling" if self._failed else self._feed.mechanism

    def _start(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self._changed

    async def _loop(self) -> None:
        try:
            async with self._feed as feed:
                await feed.start()
                self.listening.set()
                await self.poke()  # anything committed before the feed watched
                async for _ in feed:
                    await self.poke()
        except Exception as exc:  # the feed broke: the streams' own reads are the check
            log.warning("plait Studio: the store's change feed failed (%s); polling every %.1fs", exc, TICK)
            self._failed = True
            self.interval = TICK
            while True:
                await asyncio.sleep(TICK)
                await self.poke()

    async def poke(self) -> None:
        """Wake the listeners (the Studio calls it after its own writes, too)."""
        changed = self._start()
        self._generation += 1
        self._changed = asyncio.Event()
        changed.set()

    async def wait(self, seen: int, timeout: float) -> int:
        """Wait until the generation passes ``seen`` (or ``timeout``); the generation now."""
        changed = self._start()
        if self._generation == seen:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await changed.wait()
        return self._generation

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._feed.aclose()


async def changes_of(
    watcher: Watcher, look: Callable[[], Awaitable[Any]], *, event: str, is_disconnected: Callable[[], Awaitable[bool]]
) -> AsyncIterator[str]:
    """SSE frames: ``event`` with what ``look()`` returns (JSON), first at once, then each
    time it differs after the store changed; comments in between keep the stream open."""
    import json

    seen = -1
    last: str | None = None
    waited = 0.0
    while not await is_disconnected():
        try:
            data = json.dumps(await look(), default=str, sort_keys=True)
        except Exception as exc:  # the thread was deleted, the store went away: say so
            data = json.dumps({"error": str(exc)})
        if data != last:
            last = data
            waited = 0.0
            yield f"event: {event}\ndata: {data}\n\n"
        elif waited >= HEARTBEAT:
            waited = 0.0
            yield ": keep-alive\n\n"
        seen = await watcher.wait(seen, 1.0)
        waited += 1.0
