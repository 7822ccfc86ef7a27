"""A run's stream items as its worker stores them, for ``Runs.stream`` in any other process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plait.runs import _store

if TYPE_CHECKING:
    from plait.runs._notify import Notifier
    from plait.runs.client import Runs

__all__ = ["Events"]


class Events:
    """A run's stream items, stored in batches (at each committed checkpoint and at the end),
    numbered on from what earlier attempts stored. Nothing is stored for a run submitted
    without ``stream_mode``."""

    def __init__(self, runs: Runs, run_id: str, modes: Sequence[str], notifier: Notifier) -> None:
        self.runs = runs
        self.notifier = notifier
        self.run_id = run_id
        self.modes = tuple(modes)
        self.next = 1
        self.buffer: list[Any] = []

    async def open(self, stored: int | None = None) -> None:
        """Number on from the items earlier attempts stored: ``stored`` of them, or as many
        as a query finds (None)."""
        if not self.modes:
            return
        if stored is not None:
            self.next = stored + 1
            return
        async with self.runs.db.pool.connection() as conn, conn.cursor() as cur:
            await cur.execute("SELECT coalesce(max(seq), 0) FROM plait_run_event WHERE run_id = %s", (self.run_id,))
            row = await cur.fetchone()
        self.next = (row[0] if row else 0) + 1

    def add(self, mode: str, data: Any) -> None:
        if self.modes:
            self.buffer.append({"mode": mode, "data": data})

    def take(self) -> tuple[int, list[Any]] | None:
        """The buffered items with the number of the first, for a statement that stores them
        along with something else (the run's end); None when there are none."""
        if not self.buffer:
            return None
        items, self.buffer = self.buffer, []
        first, self.next = self.next, self.next + len(items)
        return first, items

    async def flush(self) -> None:
        taken = self.take()
        if taken is None:
            return
        async with self.runs.db.pool.connection() as conn, conn.cursor() as cur:
            await _store.add_events(cur, self.run_id, *taken)
        self.notifier.send("event", self.run_id)
