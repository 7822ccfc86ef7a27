"""A worker's notifications (a run ended, new stream items), sent after the changes they
announce, coalesced, and without waiting for a WAL flush.

Why not in the statement of the change: PostgreSQL lets one notifying transaction commit at
a time (a server-wide lock, taken before the commit and held through its WAL flush), so runs
whose ends notify end one fsync after another, however many workers end them. Here the
change commits on its own (in parallel with the others, sharing their flushes), and the
notification follows in a transaction that commits without waiting for the disk: nothing is
lost by that, as notifications do not outlive a server crash anyway.

Sent by a task of its own, so a run's job does not wait for its notification: while one
statement is on its way the next notifications gather and go together in the next one. A
notification lost with its worker (killed between the change and the statement) or with the
database (the statement failed) costs a waiter at most its poll (once a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from plait.runs._db import borrow
from plait.runs._store import CHANNEL

__all__ = ["Notifier"]

log = logging.getLogger("plait.runs.worker")

_BATCH = 500
"""Notifications in one statement at most."""


class Notifier:
    """The notifications of one worker, on its runs pool."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._pending: list[str] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def send(self, kind: str, run_id: str) -> None:
        """Announce ``kind:run_id`` on :data:`~plait.runs._store.CHANNEL` soon."""
        self._pending.append(f"{kind}:{run_id}")
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="plait notifier")

    async def _run(self) -> None:
        while not (self._closing and not self._pending):
            await self._wake.wait()
            self._wake.clear()
            await self._flush()

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:_BATCH], self._pending[_BATCH:]
            try:
                async with borrow(self._pool) as conn, conn.cursor() as cur:
                    await cur.execute(
                        "SELECT set_config('synchronous_commit', 'off', true), "
                        "(SELECT count(pg_notify(%s, p)) FROM unnest(%s::text[]) AS p)",
                        (CHANNEL, batch),
                    )
            except Exception as exc:  # waiters poll: they learn of it within a second
                log.warning("%d run notifications not sent (%s)", len(batch), exc)

    async def aclose(self, timeout: float = 2.0) -> None:
        """Send what is pending, then stop (before the pool closes); give up after ``timeout``
        seconds (the database is away: the waiters poll)."""
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout):
                if task is not None:
                    await task
                await self._flush()
        if task is not None and not task.done():
            task.cancel()
