"""Thread search by metadata: what "a head's metadata matches a filter" means, once.

:meth:`Checkpointer.alist_threads` keeps the threads whose head checkpoint's metadata
*contains* ``metadata``. The memory and file backends apply :func:`matches` in Python; the
SQL backends turn the filter into :func:`leaves`, one condition per leaf, and test them in
the database (SQLite's JSON functions, PostgreSQL's jsonb operators), so that a search over
10,000 threads reads no head into Python. Keeping the rule this small (no array
containment, no type coercion) is what lets every backend give the same answer; the
conformance suite (``thread_metadata``) holds them to it.

The rule, by the filter's value:

- an object: the value is an object holding each of its keys, each matching (so nested
  objects match by containment: ``{"a": {"b": 1}}`` matches ``{"a": {"b": 1, "c": 2}}``;
  ``{"a": {}}`` matches any object under ``a``);
- a list: the value is a list of the same length whose items match one by one;
- a string: an equal string; a number: an equal number (``1`` matches ``1.0``), never a
  boolean; ``true``, ``false``, ``null``: only themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Leaf", "check_metadata", "leaves", "matches"]

LeafKind = Literal["string", "number", "true", "false", "null", "object", "array"]

_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Leaf:
    """One condition of a filter: the value at ``path`` is of ``kind`` (and equals ``value``
    for a string or number; has ``value`` items for an array)."""

    path: tuple[str | int, ...]
    """Object keys (str) and list positions (int) from the metadata's top."""
    kind: LeafKind
    value: Any = None


def check_metadata(metadata: Mapping[str, Any] | None) -> None:
    """Refuse a ``metadata`` filter that is not a JSON object of JSON values.

    Raises:
        ValueError: not a mapping, a key that is not text, a value that is not JSON data
            (a set, a NaN, an object), or one nested deeper than 32 levels.
    """
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise ValueError(
            f"metadata={metadata!r}: give a JSON object (a dict) of key: value the head's metadata must hold"
        )
    problem = _problem(metadata, 0)
    if problem is not None:
        raise ValueError(
            f"metadata={metadata!r}: {problem}; give JSON data (text, numbers, true/false/null, lists, objects)"
        )


def _problem(value: Any, depth: int) -> str | None:
    if depth > _MAX_DEPTH:
        return f"nested deeper than {_MAX_DEPTH} levels"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"the key {key!r} is not text"
            if "\x00" in key:
                return f"the key {key!r} holds a NUL character"
            found = _problem(item, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for item in value:
            found = _problem(item, depth + 1)
            if found is not None:
                return found
        return None
    if value is None or isinstance(value, bool | int | str):
        return None if not isinstance(value, str) or "\x00" not in value else f"{value!r} holds a NUL character"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number"
    return f"{value!r} ({type(value).__name__}) is not JSON data"


def matches(value: Any, pattern: Any) -> bool:
    """Whether ``value`` (a head's metadata, or a part of it) matches ``pattern`` (see the
    module's rule)."""
    if isinstance(pattern, Mapping):
        return isinstance(value, Mapping) and all(k in value and matches(value[k], v) for k, v in pattern.items())
    if isinstance(pattern, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(pattern)
            and all(matches(v, p) for v, p in zip(value, pattern, strict=True))
        )
    if pattern is None or isinstance(pattern, bool):
        return value is pattern
    if isinstance(pattern, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool) and value == pattern
    return isinstance(value, str) and value == pattern


def leaves(pattern: Mapping[str, Any]) -> list[Leaf]:
    """The conditions a SQL backend tests for ``pattern``, every one of which must hold
    (``[]``: an empty filter keeps every thread)."""
    out: list[Leaf] = []
    _walk(pattern, (), out)
    return out


def _walk(pattern: Any, path: tuple[str | int, ...], out: list[Leaf]) -> None:
    if isinstance(pattern, Mapping):
        if path:  # (PostgreSQL's paths would also step into a list by a key such as "0")
            out.append(Leaf(path, "object"))
        for key, item in pattern.items():
            _walk(item, (*path, key), out)
    elif isinstance(pattern, list | tuple):
        out.append(Leaf(path, "array", len(pattern)))
        for i, item in enumerate(pattern):
            _walk(item, (*path, i), out)
    elif pattern is None:
        out.append(Leaf(path, "null"))
    elif isinstance(pattern, bool):
        out.append(Leaf(path, "true" if pattern else "false"))
    elif isinstance(pattern, int | float):
        out.append(Leaf(path, "number", pattern))
    else:
        out.append(Leaf(path, "string", pattern))
