"""Positional constructors for frozen, slotted dataclasses, for the read paths that build
one record per checkpoint of a history.

A frozen dataclass's ``__init__`` parses keywords and sets each field through
``object.__setattr__`` looked up anew per field, near twice what setting the slots directly
costs, and a 500-checkpoint history builds 500 checkpoints and 500 thread states (figures in
docs/benchmarks.md). The constructor is generated, as ``dataclasses`` generates
``__init__``, because a loop over the fields costs more than it saves.

The values go in field order and nothing is checked or defaulted: callers pass every field,
as the dataclass would store them.

:func:`given_maker` serves the records the engine makes per task (a node's context, a task's
outcome): mutable dataclasses of which a caller gives a few fields and leaves the others at
their defaults. A class called with keywords packs them in a dict before its ``__init__``
runs, which costs more than the rest of a small ``__init__``; a function called with the
given values in order and setting plain attributes does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["given_maker", "positional_maker"]

T = TypeVar("T")


def positional_maker(cls: type[T]) -> Callable[..., T]:
    """A function ``(field1, field2, ...) -> cls`` instance that sets the slots directly."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    names = [f.name for f in dataclasses.fields(cls)]
    scope: dict[str, Any] = {}
    lines = []
    for i, name in enumerate(names):
        scope[f"_set{i}"] = cls.__dict__[name].__set__
        lines.append(f"    _set{i}(obj, {name})")
    return _made(cls, names, lines, scope, "positional maker")


def _made(cls: type[T], params: Sequence[str], body: list[str], scope: dict[str, Any], label: str) -> Callable[..., T]:
    """The generated ``def make(*params): obj = _new(cls); <body>; return obj``."""
    scope.update(_new=object.__new__, _cls=cls)
    text = "\n".join([f"def make({', '.join(params)}):", "    obj = _new(_cls)", *body, "    return obj"])
    exec(text, scope)  # the text holds only the class's own field names
    make: Callable[..., T] = scope["make"]
    make.__qualname__ = f"{cls.__name__}.<{label}>"
    return make


_LITERALS: dict[Any, str] = {list: "[]", dict: "{}"}
"""Default factories written as literals in a generated maker (a call of ``list`` costs more)."""


def given_maker(cls: type[T], given: Sequence[str]) -> Callable[..., T]:
    """A function ``(given[0], given[1], ...) -> cls`` instance of a dataclass that is not
    frozen: the ``given`` fields set to the values passed in that order, every other field to
    its default (a ``default_factory`` called anew for each instance), in field order.

    Raises:
        TypeError: ``cls`` is not a dataclass, is frozen or has a ``__post_init__`` (the maker
            would skip it), ``given`` names a field it does not have, or leaves out one
            without a default.
    """
    if not dataclasses.is_dataclass(cls) or cls.__dataclass_params__.frozen or hasattr(cls, "__post_init__"):  # type: ignore[attr-defined]
        raise TypeError(f"{getattr(cls, '__name__', cls)!r} is not a mutable dataclass without __post_init__")
    fields = dataclasses.fields(cls)
    unknown = set(given) - {f.name for f in fields}
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)}")
    scope: dict[str, Any] = {}
    lines = []
    for i, f in enumerate(fields):
        if f.name in given:
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            value = _LITERALS.get(f.default_factory) or f"_factory{i}()"
            scope[f"_factory{i}"] = f.default_factory
        elif f.default is None or type(f.default) in (bool, int, str):
            value = repr(f.default)  # a constant in the generated text
        elif f.default is not dataclasses.MISSING:
            scope[f"_default{i}"] = f.default
            value = f"_default{i}"
        else:
            raise TypeError(f"{cls.__name__}.{f.name} has no default: give it")
        lines.append(f"    obj.{f.name} = {value}")
    return _made(cls, given, lines, scope, f"maker of {', '.join(given)}")
