"""From plait's stream items to the LangGraph API's stream events (what ``plait serve`` sends
and, on PostgreSQL, what a worker stores for it).

A request names the API's modes (``values``, ``updates``, ``messages-tuple``, ``custom``,
``tasks``, ``checkpoints``, ``debug``); :func:`library_modes` says which of plait's modes
give them, and :class:`Translator` turns each item into the events the SDKs parse:
``values`` carrying ``__interrupt__`` when the run pauses, ``messages`` as ``[chunk,
metadata]``, and a subgraph's events named ``{mode}|{namespace}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from plait._frozen import thaw
from plait.engine.events import CheckpointSaved, NodeFailed, NodeFinished, NodeStarted
from plait.errors import ServeRequestError
from plait.types import Interrupt

__all__ = ["API_MODES", "Translator", "api_error", "error_name", "library_modes"]

API_MODES = ("values", "updates", "messages-tuple", "messages", "custom", "tasks", "checkpoints", "debug", "events")
_INTERRUPT = "__interrupt__"


def library_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """plait's stream modes that give the API's ``modes`` (``values`` always: a run's last
    values are its answer)."""
    wanted = {"values"}
    for m in modes:
        if m not in API_MODES:
            raise ServeRequestError("stream_mode", f"unknown stream mode {m!r}; use one of {', '.join(API_MODES)}")
        if m in ("values", "updates", "custom"):
            wanted.add(m)
        elif m in ("messages-tuple", "messages"):
            wanted.add("messages")
        elif m in ("tasks", "checkpoints", "debug", "events"):
            wanted.add("events")
    return tuple(sorted(wanted))


def error_name(exc: BaseException) -> str:
    """What the API calls a failure: the node's own exception class (``ValueError``), not
    plait's wrapper around it (``NodeError``), as LangGraph's server names it."""
    cause = exc.__cause__
    if type(exc).__name__ in ("NodeError", "NodeTimeoutError") and cause is not None:
        return type(cause).__name__
    return type(exc).__name__


def api_error(exc: BaseException) -> dict[str, Any]:
    """A failure as the API's ``error`` event and ``__error__`` document carry it."""
    return {"error": error_name(exc), "message": str(exc)}


def _interrupts(items: Iterable[Any]) -> list[dict[str, Any]]:
    return [{"value": i.value, "id": i.id, "node": i.node} if isinstance(i, Interrupt) else thaw(i) for i in items]


class Translator:
    """The events of one run, for the API modes it was asked for."""

    def __init__(self, modes: Sequence[str], subgraphs: bool, thread_id: str) -> None:
        self.modes = set(modes) or {"values"}
        self.subgraphs = subgraphs
        self.thread_id = thread_id
        self.values: dict[tuple[str, ...], dict[str, Any]] = {}
        """The latest values of each graph of the run (a pause adds its interrupts to them)."""

    def name(self, mode: str, ns: tuple[str, ...]) -> str:
        return mode if not ns else f"{mode}|{'|'.join(ns)}"

    def events(self, ns: tuple[str, ...], mode: str, item: Any) -> list[tuple[str, Any]]:
        """The API events of one plait stream item (none when not asked for)."""
        if ns and not self.subgraphs:
            return []
        if mode == "values":
            if isinstance(item, Mapping) and set(item) == {_INTERRUPT}:
                doc = {**self.values.get(ns, {}), _INTERRUPT: _interrupts(item[_INTERRUPT])}
            else:
                doc = self.values[ns] = thaw(item)
            return [(self.name("values", ns), doc)] if "values" in self.modes else []
        if mode == "updates":
            if "updates" not in self.modes:
                return []
            if isinstance(item, Mapping) and set(item) == {_INTERRUPT}:
                return [(self.name("updates", ns), {_INTERRUPT: _interrupts(item[_INTERRUPT])})]
            return [(self.name("updates", ns), thaw(item))]
        if mode == "custom":
            return [(self.name("custom", ns), thaw(item))] if "custom" in self.modes else []
        if mode == "messages":
            if "messages-tuple" in self.modes or "messages" in self.modes:
                chunk, metadata = item
                return [(self.name("messages", ns), [thaw(chunk), {**thaw(metadata), "thread_id": self.thread_id}])]
            return []
        if mode == "events":
            return self._task_events(ns, item)
        return []

    def _task_events(self, ns: tuple[str, ...], event: Any) -> list[tuple[str, Any]]:
        payload: dict[str, Any] | None = None
        kind = ""
        if isinstance(event, NodeStarted):
            kind, payload = "task", {"id": event.task_id, "name": event.node, "input": None, "triggers": []}
        elif isinstance(event, NodeFinished):
            result = [[k, v] for k, vs in thaw(event.writes).items() for v in vs]
            kind, payload = "task_result", {
                "id": event.task_id, "name": event.node, "error": None, "result": result, "interrupts": [],
            }  # fmt: skip
        elif isinstance(event, NodeFailed) and not event.will_retry:
            kind, payload = "task_result", {
                "id": event.task_id, "name": event.node, "error": event.error, "result": [], "interrupts": [],
            }  # fmt: skip
        if payload is None:
            return []
        out: list[tuple[str, Any]] = []
        if "tasks" in self.modes:
            out.append((self.name("tasks", ns), payload))
        if "debug" in self.modes:
            step = event.step
            out.append((self.name("debug", ns), {"type": kind, "timestamp": _now(), "step": step, "payload": payload}))
        return out

    def wants_checkpoints(self) -> bool:
        return bool(self.modes & {"checkpoints", "debug"})

    def checkpoint_events(
        self, ns: tuple[str, ...], state: dict[str, Any], step: int, at: str | None = None
    ) -> list[tuple[str, Any]]:
        """The events of a stored checkpoint (``state`` as :func:`plait.graph.api_state.state_json`
        makes it), for the ``checkpoints`` and ``debug`` modes; ``at``: when it was stored
        (ISO 8601; now when not given), the ``debug`` event's timestamp."""
        if ns and not self.subgraphs:
            return []
        doc = {
            "config": {"configurable": {**(state["checkpoint"] or {})}},
            "parent_config": None
            if state["parent_checkpoint"] is None
            else {"configurable": {**state["parent_checkpoint"]}},
            **{k: state[k] for k in ("values", "metadata", "next", "tasks", "checkpoint", "parent_checkpoint")},
        }
        out: list[tuple[str, Any]] = []
        if "checkpoints" in self.modes:
            out.append((self.name("checkpoints", ns), doc))
        if "debug" in self.modes:
            debug = {"type": "checkpoint", "timestamp": at or _now(), "step": step, "payload": doc}
            out.append((self.name("debug", ns), debug))
        return out

    @staticmethod
    def is_checkpoint(event: Any) -> bool:
        return isinstance(event, CheckpointSaved)


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat()
