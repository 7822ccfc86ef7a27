"""Live updates: noticing that the store changed, whichever process changed it.

A :class:`Watcher` wakes its listeners when the store may have changed; each SSE stream then
reads what it shows (a thread's head and status, the first page of threads) and sends an
event only when that differs from what it sent last. How the watcher notices:

* SQLite: ``PRAGMA data_version`` on a connection of its own, polled every 0.2 s; it
  changes when any other connection (any process) commits, and costs no table read.
* PostgreSQL: LISTEN/NOTIFY, through a trigger the Studio installs once
  (:mod:`plait.server.pg_notify`); without the rights to create it, polling as below.
* any other store: a tick every 0.5 s (the streams' own reads are the check).

Either way a checkpoint committed anywhere reaches an open page within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.server.pg_notify import listen

log = logging.getLogger("plait.server")

__all__ = ["Watcher", "changes_of"]

SQLITE_POLL = 0.2
TICK = 0.5
HEARTBEAT = 15.0
"""Seconds between SSE comments that keep an idle stream (and its proxies) open."""


class Watcher:
    """Wakes every listener when the store may have changed."""

    def __init__(self, checkpointer: Checkpointer, *, interval: float | None = None) -> None:
        self._saver = checkpointer
        from plait.server.pg_notify import pg_target

        self._path = _sqlite_path(checkpointer)
        self._pg = pg_target(checkpointer)
        self.interval = interval if interval is not None else (SQLITE_POLL if self._path else TICK)
        self.listening = asyncio.Event()
        """Set once PostgreSQL notices are being listened for."""
        self._generation = 0
        self._changed: asyncio.Event | None = None
        """Set (and replaced by a fresh one) at each wake-up. An Event, not a Condition:
        a wait that times out is cancelled, and a cancelled ``Condition.wait`` can leave its
        lock unreleased on Python 3.11, which would hang every later wake-up."""
        self._task: asyncio.Task[None] | None = None
        self._conn: sqlite3.Connection | None = None

    @property
    def mechanism(self) -> str:
        if self._path:
            return "sqlite data_version"
        return "postgres listen/notify" if self._pg else "polling"

    def _start(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self._changed

    async def _loop(self) -> None:
        if self._pg is not None:
            try:
                await listen(*self._pg, self.poke, self.listening)
            except Exception as exc:  # no rights to add the trigger, no LISTEN: poll instead
                log.warning("plait Studio: PostgreSQL notices unavailable (%s); polling every %.1fs", exc, TICK)
                self._pg = None
                self.interval = TICK
        last: int | None = None
        while True:
            await asyncio.sleep(self.interval)
            now = self._data_version()
            if now is None or now != last:
                last = now
                await self.poke()

    def _data_version(self) -> int | None:
        if self._path is None:
            return None
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, check_same_thread=False)
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self._conn = None
            return None

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
        if self._conn is not None:
            self._conn.close()


def _sqlite_path(checkpointer: Checkpointer) -> str | None:
    from plait.checkpoint.sqlite import SqliteCheckpointer

    if isinstance(checkpointer, SqliteCheckpointer) and checkpointer.path != ":memory:":
        return checkpointer.path
    return None


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
