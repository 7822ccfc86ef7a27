"""A run's stream items as its worker stores them, for ``Runs.stream`` in any other process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plait._frozen import thaw
from plait.engine.events import event_json
from plait.runs import _store
from plait.stream_wire import Translator, library_modes

if TYPE_CHECKING:
    from plait.runs._notify import Notifier
    from plait.runs.client import Runs

__all__ = ["Events", "WireEvents"]


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
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute("SELECT coalesce(max(seq), 0) FROM plait_run_event WHERE run_id = %s", (self.run_id,))
            row = await cur.fetchone()
        self.next = (row[0] if row else 0) + 1

    def add(self, mode: str, data: Any) -> None:
        if self.modes:
            self.buffer.append({"mode": mode, "data": data})

    def item(self, mode: str, item: Any) -> None:
        """A stream item of the run, as the engine made it (stored as JSON data)."""
        self.add(mode, event_json(item) if mode == "events" else thaw(item))

    async def drain(self) -> None:
        """Wait until nothing is being stored (so that what is stored next comes after it)."""

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
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await _store.add_events(cur, self.run_id, *taken)
        self.notifier.send("event", self.run_id)


class WireEvents(Events):
    """A run's stream stored as the LangGraph API's events (``{"event", "data"}``), for
    ``plait serve``: each stored soon after it is made (a token's chunk must not wait for
    the end of its step), by one flusher at a time, so that events commit in the order of
    their numbers and a reader that read up to one never misses an earlier one."""

    def __init__(self, runs: Runs, run_id: str, wire: Mapping[str, Any], thread_id: str, notifier: Notifier) -> None:
        super().__init__(runs, run_id, library_modes(list(wire.get("modes") or ["values"])), notifier)
        self.translator = Translator(list(wire.get("modes") or ["values"]), bool(wire.get("subgraphs")), thread_id)
        self.flusher: asyncio.Task[None] | None = None

    def add(self, mode: str, data: Any) -> None:
        if mode != "status":
            return
        status = data.get("status")
        if status == "running":
            self._event("metadata", {"run_id": self.run_id, "attempt": data.get("attempt", 1)})
        elif status in ("error", "timeout") and data.get("error"):
            error = data["error"]
            name = error.get("cause") or error.get("type", "Error")
            self._event("error", {"error": name, "message": error.get("message", "")})

    def item(self, mode: str, item: Any) -> None:
        for name, data in self.translator.events((), mode, item):
            self._event(name, data)

    def _event(self, name: str, data: Any) -> None:
        self.buffer.append({"event": name, "data": data})
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self._flush_all())

    async def _flush_all(self) -> None:
        while self.buffer:
            await Events.flush(self)

    async def drain(self) -> None:
        while self.flusher is not None and not self.flusher.done():
            await asyncio.shield(self.flusher)
        if self.flusher is not None and not self.flusher.cancelled() and self.flusher.exception() is not None:
            raise self.flusher.exception()  # type: ignore[misc]

    async def flush(self) -> None:
        await self.drain()
        await Events.flush(self)
