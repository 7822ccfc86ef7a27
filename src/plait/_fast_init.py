"""Positional constructors for frozen, slotted dataclasses, for the read paths that build
one record per checkpoint of a history.

A frozen dataclass's ``__init__`` parses keywords and sets each field through
``object.__setattr__`` looked up anew per field, near twice what setting the slots directly
costs, and a 500-checkpoint history builds 500 checkpoints and 500 thread states (figures in
docs/benchmarks.md). The constructor is generated, as ``dataclasses`` generates
``__init__``, because a loop over the fields costs more than it saves.

The values go in field order and nothing is checked or defaulted: callers pass every field,
as the dataclass would store them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["positional_maker"]

T = TypeVar("T")


def positional_maker(cls: type[T]) -> Callable[..., T]:
    """A function ``(field1, field2, ...) -> cls`` instance that sets the slots directly."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    names = [f.name for f in dataclasses.fields(cls)]
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = [f"def make({', '.join(names)}):", "    obj = _new(_cls)"]
    for i, name in enumerate(names):
        scope[f"_set{i}"] = cls.__dict__[name].__set__
        lines.append(f"    _set{i}(obj, {name})")
    lines.append("    return obj")
    exec("\n".join(lines), scope)  # the text holds only the class's own field names
    make: Callable[..., T] = scope["make"]
    make.__qualname__ = f"{cls.__name__}.<positional maker>"
    return make
