"""Managed values: state fields plait computes for each step instead of storing them.

LangGraph's ``RemainingSteps`` and ``IsLastStep``, declared the same way, as a field of the
state: ``remaining_steps: RemainingSteps``. Such a field is no channel (nothing is stored,
and it is absent from ``invoke``'s result and from ``get_state``); a node and a router read
it from the state they are given, as a fresh number each step. A write to it, in an input or
a node's update, is dropped, as LangGraph drops it: a ported node that returns the whole state
it was given keeps working.

The numbers are LangGraph's. A run may take ``recursion_limit`` super-steps; a node in the
run's ``n``-th step (``n`` from 0) sees ``remaining_steps == recursion_limit - 1 - n``: how
many more steps the run may take after this one, so the last step that can run sees 0 (in
LangGraph's numbering, whose first node runs in step 1, a node at step ``k`` sees
``recursion_limit - k``). ``is_last_step`` is true when ``remaining_steps == 1``, exactly as
in LangGraph, so that a node that sees it and routes to one more node still ends within the
limit. A subgraph counts its own steps, under the same limit.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

__all__ = ["IsLastStep", "Managed", "RemainingSteps", "managed_fields", "managed_values"]

ManagedKind = Literal["remaining_steps", "is_last_step"]

_QUALIFIERS = tuple(q for q in (typing.Required, typing.NotRequired, getattr(typing, "ReadOnly", None)) if q)


@dataclass(frozen=True, slots=True)
class Managed:
    """The marker in ``Annotated[int, Managed("remaining_steps")]``: not callable, so a
    schema never mistakes it for a reducer."""

    kind: ManagedKind


RemainingSteps = Annotated[int, Managed("remaining_steps")]
"""``remaining_steps: RemainingSteps``: how many more super-steps the run may take after
this one (0 in the last step the recursion limit allows)."""

IsLastStep = Annotated[bool, Managed("is_last_step")]
"""``is_last_step: IsLastStep``: true when one more step may run after this one, as in LangGraph."""


def managed_fields(declared: Any) -> dict[str, ManagedKind]:
    """The managed fields of a state type (a TypedDict, a dataclass, a model: any class
    with annotations), by field name; empty for anything else (a built StateSchema)."""
    if not isinstance(declared, type):
        return {}
    try:
        hints = get_type_hints(declared, include_extras=True)
    except Exception:  # an unresolvable hint: the schema's own reading reports it
        return {}
    out: dict[str, ManagedKind] = {}
    for key, declared_hint in hints.items():
        hint = declared_hint
        while get_origin(hint) in _QUALIFIERS:  # NotRequired[RemainingSteps]
            hint = get_args(hint)[0]
        if get_origin(hint) is Annotated:
            for meta in get_args(hint)[1:]:
                if isinstance(meta, Managed):
                    out[key] = meta.kind
    return out


def managed_values(managed: Mapping[str, ManagedKind], recursion_limit: int, steps_done: int) -> dict[str, Any]:
    """The managed fields' values for a step after ``steps_done`` steps of the run."""
    remaining = recursion_limit - 1 - steps_done
    return {key: remaining if kind == "remaining_steps" else remaining == 1 for key, kind in managed.items()}
