"""How long a step's nodes took, and who ran it, as the timeline shows them.

A run writes a step checkpoint's ``timings`` metadata (``[[node, seconds, attempts], ...]``,
in task order) and, when it was given an owner (a ``plait worker`` gives
``"<worker>/job-<n>"``), its ``owner``. Older checkpoints, updates and forks have neither,
and metadata is the caller's to write: anything that is not that shape is shown as nothing
rather than failing the page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NodeTiming", "StepTiming", "duration_text", "step_timing"]


@dataclass(frozen=True)
class NodeTiming:
    node: str
    seconds: float
    attempts: int

    @property
    def took(self) -> str:
        return duration_text(self.seconds)


@dataclass(frozen=True)
class StepTiming:
    nodes: tuple[NodeTiming, ...]
    owner: str | None

    @property
    def retried(self) -> bool:
        return any(n.attempts > 1 for n in self.nodes)


def duration_text(seconds: float) -> str:
    """``24 µs``, ``12 ms``, ``1.3 s``, ``2 min 5 s``: short, and exact enough to compare
    the nodes of one step."""
    if seconds < 0.0005:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


def _node(entry: Any) -> NodeTiming | None:
    if not isinstance(entry, list | tuple) or len(entry) < 2:
        return None
    node, seconds = entry[0], entry[1]
    attempts = entry[2] if len(entry) > 2 else 1
    if not isinstance(node, str) or isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        attempts = 1
    return NodeTiming(node, max(0.0, float(seconds)), max(1, attempts))


def step_timing(metadata: Mapping[str, Any]) -> StepTiming | None:
    """The step's node durations and owner from a checkpoint's metadata; None when it has
    neither (an older checkpoint, an update, a fork)."""
    raw = metadata.get("timings")
    nodes = tuple(t for t in map(_node, raw) if t is not None) if isinstance(raw, list | tuple) else ()
    owner = metadata.get("owner")
    owner = owner if isinstance(owner, str) and owner else None
    if not nodes and owner is None:
        return None
    return StepTiming(nodes, owner)
