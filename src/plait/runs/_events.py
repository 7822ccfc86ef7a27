"""A run's stream items as its worker stores them, for ``Runs.stream`` in any other process."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from plait._frozen import thaw
from plait.engine.events import event_json
from plait.graph.api_state import checkpoint_events
from plait.runs import _store
from plait.stream_wire import Translator, library_modes

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.runs._notify import Notifier
    from plait.runs.client import Runs
    from plait.runs.records import Run

__all__ = ["Events", "WireEvents"]


@dataclass(frozen=True, slots=True, eq=False)
class _Saved:
    """A checkpoint the run stored, in a :class:`WireEvents` buffer until its events are made."""

    ns: tuple[str, ...]
    event: Any
    at: str = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat())
    """When it came: its ``debug`` event's timestamp, as if made then."""


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

    subgraphs = False
    """Whether the items of the run's subgraphs are wanted too (:meth:`item` with a namespace)."""

    def item(self, mode: str, item: Any, ns: tuple[str, ...] = ()) -> None:
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
    their numbers and a reader that read up to one never misses an earlier one.

    It gets the items of the run's subgraphs too, as ``plait serve``'s own runs do (the
    translator keeps them only for ``stream_subgraphs``), and a checkpoint's ``checkpoints``
    and ``debug`` events are made by the flusher, which reads the checkpoint back first."""

    subgraphs = True

    def __init__(self, runs: Runs, run: Run, notifier: Notifier, checkpointer: Checkpointer) -> None:
        wire: Mapping[str, Any] = (run.options or {})["wire"]
        super().__init__(runs, run.run_id, library_modes(list(wire.get("modes") or ["values"])), notifier)
        self.translator = Translator(list(wire.get("modes") or ["values"]), bool(wire.get("subgraphs")), run.thread_id)
        self.checkpointer = checkpointer
        self.thread_id = run.thread_id
        self.namespace = run.namespace
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

    def item(self, mode: str, item: Any, ns: tuple[str, ...] = ()) -> None:
        if mode == "events" and self.translator.is_checkpoint(item):
            if self.translator.wants_checkpoints():
                self._queue(_Saved(ns, item))  # its events once the flusher read it back
            return
        for name, data in self.translator.events(ns, mode, item):
            self._event(name, data)

    def _event(self, name: str, data: Any) -> None:
        self._queue({"event": name, "data": data})

    def _queue(self, entry: Any) -> None:
        self.buffer.append(entry)
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self._flush_all())

    async def _read_checkpoints(self) -> None:
        """Put each checkpoint's events where it stands in the buffer (what comes in meanwhile
        is read too), so that the buffer is events only when this returns."""
        i = 0
        while i < len(self.buffer):
            entry = self.buffer[i]
            if not isinstance(entry, _Saved):
                i += 1
                continue
            made = await checkpoint_events(
                self.translator, self.checkpointer, self.thread_id, self.namespace, entry.ns, entry.event, entry.at
            )
            at = self.buffer.index(entry)  # nothing before it goes meanwhile: only appends
            self.buffer[at : at + 1] = [{"event": name, "data": data} for name, data in made]
            i = at + len(made)

    async def _flush_all(self) -> None:
        while self.buffer:
            await self._read_checkpoints()
            await Events.flush(self)  # takes the buffer before it awaits anything

    async def drain(self) -> None:
        while self.flusher is not None and not self.flusher.done():
            await asyncio.shield(self.flusher)
        if self.flusher is not None and not self.flusher.cancelled() and self.flusher.exception() is not None:
            raise self.flusher.exception()  # type: ignore[misc]

    async def flush(self) -> None:
        await self.drain()
        await Events.flush(self)
