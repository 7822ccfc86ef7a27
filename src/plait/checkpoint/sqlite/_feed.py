"""The change feed of a SQLite file: ``PRAGMA data_version`` on a connection of its own.

``data_version`` changes when any other connection, in any process, commits to the file, and
reading it costs no table read; it says only that something changed. When it moved, one read
of the thread rows on the same connection (:data:`~plait.checkpoint.feed.THREAD_ROWS`) says
which threads: a commit after that read moves the version again, so the next look sees it.
The connection is read-only and the feed's own: the store's reader and writer never wait
for it. A file that does not exist yet is looked for again at every poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from typing import Any

from plait.checkpoint.feed import THREAD_ROWS, ChangeFeed, RowTracker, ThreadChange

__all__ = ["POLL", "SqliteFeed"]

POLL = 0.2
"""Seconds between two reads of ``data_version`` (the read costs microseconds)."""


class SqliteFeed(ChangeFeed):
    """Changes of the SQLite file ``path`` (tables prefixed ``prefix``), every ``interval`` s."""

    def __init__(
        self,
        path: str,
        *,
        prefix: str,
        interval: float | None = None,
        namespace: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(mechanism="sqlite data_version", namespace=namespace, thread_id=thread_id)
        self.path = path
        self.interval: float = POLL if interval is None else interval
        self._rows = THREAD_ROWS.format(P=prefix, since="?")
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        self._tracker = RowTracker()
        self._lock = threading.Lock()
        """Held by a look (on a worker thread) and by closing, which may not wait for it."""

    def _look(self) -> list[ThreadChange] | None:
        """The threads that changed, None when the version did not move (runs on a thread)."""
        with self._lock:
            return self._look_locked()

    def _look_locked(self) -> list[ThreadChange] | None:
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._version and self._tracker.primed:
                return None
            self._version = version
            rows: list[Any] = self._conn.execute(self._rows, (self._tracker.since,)).fetchall()
        except sqlite3.Error as exc:
            if self._conn is not None and "no such table" not in str(exc):
                self._release()  # the file went away or was replaced: open it afresh
            rows = []
        return self._tracker.look(rows)

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _watch(self) -> None:
        try:
            await asyncio.to_thread(self._look)
            self.ready.set()
            while True:
                await asyncio.sleep(self.interval)
                changed = await asyncio.to_thread(self._look)
                if changed:
                    self._emit(changed)
        finally:
            with self._lock, contextlib.suppress(sqlite3.Error):
                self._release()
