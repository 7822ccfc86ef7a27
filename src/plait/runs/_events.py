"""A run's stream items as its worker stores them, for ``Runs.stream`` in any other process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plait.runs import _store

if TYPE_CHECKING:
    from plait.runs.client import Runs

__all__ = ["Events"]


class Events:
    """A run's stream items, stored in batches (at each committed checkpoint and at the end),
    numbered on from what earlier attempts stored. Nothing is stored for a run submitted
    without ``stream_mode``."""

    def __init__(self, runs: Runs, run_id: str, modes: Sequence[str]) -> None:
        self.runs = runs
        self.run_id = run_id
        self.modes = tuple(modes)
        self.next = 1
        self.buffer: list[Any] = []

    async def open(self) -> None:
        if not self.modes:
            return
        async with self.runs.db.pool.connection() as conn, conn.cursor() as cur:
            await cur.execute("SELECT coalesce(max(seq), 0) FROM plait_run_event WHERE run_id = %s", (self.run_id,))
            row = await cur.fetchone()
        self.next = (row[0] if row else 0) + 1

    def add(self, mode: str, data: Any) -> None:
        if self.modes:
            self.buffer.append({"mode": mode, "data": data})

    async def flush(self, cur: Any = None) -> None:
        if not self.buffer:
            return
        items, self.buffer = self.buffer, []
        if cur is not None:
            await _store.add_events(cur, self.run_id, self.next, items)
        else:
            async with self.runs.db.pool.connection() as conn, conn.cursor() as c:
                await _store.add_events(c, self.run_id, self.next, items)
        self.next += len(items)
