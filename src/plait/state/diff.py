"""Differences between two states: which keys were added, removed or changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from plait._codec import canonical
from plait.state.run_state import RunState, StateSnapshot

__all__ = ["Change", "StateDiff", "diff"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One key whose value differs."""

    key: str
    """The channel."""
    before: Any
    """Its value in the first state (``a``)."""
    after: Any
    """Its value in the second state (``b``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateDiff:
    """What changed from ``a`` to ``b``. Falsy when the two are equal."""

    added: Mapping[str, Any] = field(default_factory=dict)
    """Keys with a value in ``b`` only, with that value."""
    removed: Mapping[str, Any] = field(default_factory=dict)
    """Keys with a value in ``a`` only, with that value."""
    changed: tuple[Change, ...] = ()
    """Keys in both whose values differ."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key that differs, in a stable order."""
        return tuple(sorted({*self.added, *self.removed, *(c.key for c in self.changed)}))

    def to_json(self) -> dict[str, Any]:
        return {
            "added": dict(self.added),
            "removed": dict(self.removed),
            "changed": [{"key": c.key, "before": c.before, "after": c.after} for c in self.changed],
        }


def _values(x: StateSnapshot | RunState | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(x, StateSnapshot | RunState):
        return x.values
    values = getattr(x, "values", None)  # any snapshot-like record (e.g. a checkpoint's state)
    if isinstance(values, Mapping):
        return values
    return x


def _differ(x: Any, y: Any) -> bool:
    """JSON inequality: Python calls ``1``, ``1.0`` and ``True`` (or ``0.0`` and ``-0.0``) equal,
    but they are different JSON and give different fingerprints."""
    if x is y:
        return False
    if x != y:
        return True
    try:
        return canonical(x) != canonical(y)
    except TypeError:  # not JSON data (a plain mapping passed in): Python equality decides
        return False


def diff(a: StateSnapshot | RunState | Mapping[str, Any], b: StateSnapshot | RunState | Mapping[str, Any]) -> StateDiff:
    """Compare two snapshots, run states, or plain mappings of values."""
    va, vb = _values(a), _values(b)
    added = {k: vb[k] for k in vb if k not in va}
    removed = {k: va[k] for k in va if k not in vb}
    changed = tuple(Change(key=k, before=va[k], after=vb[k]) for k in va if k in vb and _differ(va[k], vb[k]))
    return StateDiff(added=added, removed=removed, changed=changed)
