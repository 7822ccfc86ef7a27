"""What a run reports while it runs: the records ``stream(mode="events")`` yields.

Every record is a frozen dataclass with ``kind`` and :meth:`to_json`, so the same events feed
the terminal, logs and the CLI without translation. ``StateUpdated`` comes from the state
layer and is re-used as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from plait.state.run_state import StateUpdated
from plait.types import Interrupt

__all__ = [
    "CheckpointSaved",
    "CustomEvent",
    "Event",
    "Interrupted",
    "NodeFailed",
    "NodeFinished",
    "NodeStarted",
    "RunFinished",
    "StateUpdated",
    "event_json",
    "update_item",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeStarted:
    kind: ClassVar[str] = "node_started"
    node: str
    task_id: str
    step: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFinished:
    kind: ClassVar[str] = "node_finished"
    node: str
    task_id: str
    step: int
    writes: dict[str, Any]
    """The channel writes the node made (channel -> list of values written)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailed:
    kind: ClassVar[str] = "node_failed"
    node: str
    task_id: str
    step: int
    error: str
    attempt: int
    will_retry: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointSaved:
    kind: ClassVar[str] = "checkpoint_saved"
    checkpoint_id: str
    step: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted:
    kind: ClassVar[str] = "interrupted"
    interrupts: tuple[Interrupt, ...]
    step: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished:
    kind: ClassVar[str] = "run_finished"
    thread_id: str | None
    step: int
    status: str
    """``done``, ``interrupted``, ``stopped`` (at a step boundary, by the run's hooks) or ``failed``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomEvent:
    kind: ClassVar[str] = "custom"
    node: str
    step: int
    payload: Any


Event = (
    NodeStarted | NodeFinished | NodeFailed | CheckpointSaved | Interrupted | RunFinished | CustomEvent | StateUpdated
)


def event_json(event: Event) -> dict[str, Any]:
    """An event as JSON data, with its kind."""
    kind = getattr(event, "kind", "state_updated")
    data = asdict(event)
    if isinstance(event, Interrupted):
        data["interrupts"] = [i.to_json() for i in event.interrupts]
    return {"kind": kind, **data}


def update_item(writes: Sequence[tuple[str, Any]]) -> dict[str, Any] | list[dict[str, Any]]:
    """What ``stream(mode="updates")`` shows of one task's writes, under its node's name.

    ``{key: value, ...}`` when the task wrote each key once (the common case); when it wrote
    some key more than once (a list of pairs, a ``Command`` update with repeats), a list of
    one-key dicts, one per write in the order written, so that no write is dropped.
    """
    item = dict(writes)
    if len(item) == len(writes):
        return item
    return [{key: value} for key, value in writes]
