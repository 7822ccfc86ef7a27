"""Per-run values given to nodes (``invoke(..., context=...)``): checked against the type
the graph declares (``Graph(State, context=Ctx)``) once, before the run starts.

The context is never checkpointed: it is the caller's (a model name, a user id, a client
object) and a resume passes it again. So it need not be JSON data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, is_typeddict

from plait.errors import ContextError

__all__ = ["coerce_context"]


def coerce_context(declared: type | None, value: Any) -> Any:
    """``value`` as the graph's context: a dict made into the declared dataclass (or
    pydantic model), a TypedDict's keys checked (it stays a dict), anything else checked
    with ``isinstance``; no value (None) is the declared type's defaults. Without a
    declared type the value is passed as given.

    Raises:
        ContextError: a missing or unknown field, or a value of another type.
    """
    if declared is None:
        return value
    name = getattr(declared, "__name__", repr(declared))
    if value is None:
        return _without_context(declared, name)
    if is_typeddict(declared):
        if not isinstance(value, Mapping):
            raise ContextError(name, f"got {type(value).__name__}, not a mapping")
        _check_keys(name, set(value), set(declared.__annotations__), set(getattr(declared, "__required_keys__", ())))
        return dict(value)
    if isinstance(value, declared):
        return value
    if not isinstance(value, Mapping):
        raise ContextError(name, f"got {type(value).__name__}")
    validate = getattr(declared, "model_validate", None)  # a pydantic model
    if callable(validate):
        try:
            return validate(dict(value))
        except ValueError as exc:
            raise ContextError(name, str(exc)) from exc
    if dataclasses.is_dataclass(declared):
        fields = [f for f in dataclasses.fields(declared) if f.init]
        required = {
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        _check_keys(name, set(value), {f.name for f in fields}, required)
        return declared(**value)
    raise ContextError(name, "a mapping can only be made into a dataclass, a TypedDict or a pydantic model")


def _without_context(declared: type, name: str) -> Any:
    """The context of a run given none: the declared type built from its defaults, so that
    a node reads ``ctx.context.field`` as it would with one; a type with a required field,
    or one that cannot be built from nothing, refuses to run (a node would otherwise meet
    ``ctx.context = None`` where its declared type promised fields)."""
    if is_typeddict(declared):
        _check_keys(name, set(), set(declared.__annotations__), set(getattr(declared, "__required_keys__", ())))
        return {}
    validate = getattr(declared, "model_validate", None)  # a pydantic model
    if callable(validate):
        try:
            return validate({})
        except ValueError as exc:
            raise ContextError(name, f"no context was given, and it has required fields ({exc})") from exc
    if dataclasses.is_dataclass(declared):
        return coerce_context(declared, {})
    raise ContextError(name, "no context was given")


def _check_keys(name: str, given: set[str], known: set[str], required: set[str]) -> None:
    missing, unknown = sorted(required - given), sorted(given - known)
    if missing:
        raise ContextError(name, "missing " + ", ".join(repr(k) for k in missing))
    if unknown:
        raise ContextError(
            name, "unknown " + ", ".join(repr(k) for k in unknown) + f"; it has {', '.join(sorted(known))}"
        )
