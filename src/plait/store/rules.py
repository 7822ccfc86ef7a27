"""What the memory store accepts, checked once here for every backend: namespaces, keys,
values, paging, time to live, and search filters (parsed into conditions, and run in Python
where the data lives in this process).

The filter semantics every backend follows (SQL backends compile the same conditions):
JSON equality (``1 == 1.0``; ``True`` is not ``1``; objects and lists compare whole); ``$gt``
and friends compare numbers with numbers and text with text (code-point order), and any
other pair does not match; a path that is missing matches only ``$ne``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast, get_args

from plait._codec import freeze
from plait._frozen import thaw
from plait.errors import InvalidMemoryError, InvalidNamespaceError, MemoryFilterError, NotSerializableError
from plait.store.records import Condition, Namespace, Operator

__all__ = [
    "OPERATORS",
    "check_key",
    "check_namespace",
    "check_page",
    "check_prefix",
    "check_ttl",
    "check_value",
    "holds",
    "matches",
    "parse_filter",
    "same_json",
]

_ALL: Final = 2**62
OPERATORS: Final[frozenset[str]] = frozenset(get_args(Operator))
_MISSING: Final = object()


def _labels(namespace: Any, *, empty_ok: bool) -> Namespace:
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise InvalidNamespaceError(namespace, f"it is a {type(namespace).__name__}, not a tuple of labels")
    labels = tuple(namespace)
    if not labels and not empty_ok:
        raise InvalidNamespaceError(namespace, "it is empty")
    for label in labels:
        if type(label) is not str:
            raise InvalidNamespaceError(namespace, f"label {label!r} is a {type(label).__name__}, not text")
        if not label:
            raise InvalidNamespaceError(namespace, "a label is empty")
        if "." in label:
            raise InvalidNamespaceError(namespace, f'label {label!r} holds a "." (stores join labels with it)')
        if "\x00" in label:
            raise InvalidNamespaceError(namespace, f"label {label!r} holds a NUL character")
        try:
            label.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidNamespaceError(namespace, f"label {label!r} is not valid Unicode text") from None
    return labels


def check_namespace(namespace: Any) -> Namespace:
    """``namespace`` as a tuple of labels (a list is taken too).

    Raises:
        InvalidNamespaceError: empty, or a label that is not non-empty text without "." or NUL.
    """
    return _labels(namespace, empty_ok=False)


def check_prefix(prefix: Any, *, wildcards: bool = False) -> Namespace:
    """A namespace prefix (``()`` for every namespace); ``wildcards``: ``"*"`` labels allowed."""
    return _labels(prefix, empty_ok=True)


def check_key(namespace: Namespace | None, key: Any) -> str:
    if type(key) is not str or not key:
        raise InvalidMemoryError(namespace, key, "a key is non-empty text")
    if "\x00" in key:
        raise InvalidMemoryError(namespace, key, "a key holds no NUL character")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMemoryError(namespace, key, "a key is valid Unicode text") from None
    return key


def check_value(namespace: Namespace, key: str, value: Any) -> Mapping[str, Any]:
    """``value`` frozen (checked JSON data; nobody can change it afterwards).

    Raises:
        InvalidMemoryError: not a JSON object, or holding something that is not JSON data.
    """
    if not isinstance(value, Mapping):
        raise InvalidMemoryError(namespace, key, f"a value is a JSON object (a dict), not a {type(value).__name__}")
    try:
        frozen = freeze(value, f"memory {key!r}")
    except NotSerializableError as exc:
        raise InvalidMemoryError(namespace, key, str(exc)) from None
    return cast(Mapping[str, Any], frozen)


MAX_TTL_MINUTES: Final = 100 * 366 * 24 * 60
"""A century: a longer life is "never" (and would not fit the stores' 64-bit microsecond times)."""


def check_ttl(namespace: Namespace | None, key: Any, ttl: Any) -> float | None:
    if ttl is None:
        return None
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not math.isfinite(ttl)
        or not 0 < ttl <= MAX_TTL_MINUTES
    ):
        raise InvalidMemoryError(
            namespace, key, f"ttl={ttl!r}: give minutes (a positive number up to a century), or None for never"
        )
    return float(ttl)


def check_page(limit: Any, offset: Any) -> tuple[int, int]:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit={limit!r}: give a number of items, 0 or more")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset={offset!r}: give a number of items to skip, 0 or more")
    # past 2**62 every count means "all" (and a database's 64-bit integers cannot take more)
    return min(limit, _ALL), min(offset, _ALL)


def parse_filter(filter: Mapping[str, Any] | None) -> tuple[Condition, ...]:
    """The conditions of a search ``filter``.

    Raises:
        MemoryFilterError: not a mapping, a key that names no path, an unknown operator, or
            an operand that is not JSON data.
    """
    if not filter:
        return ()
    if not isinstance(filter, Mapping):
        raise MemoryFilterError(filter, f"it is a {type(filter).__name__}, not a dict")
    out: list[Condition] = []
    for name, wanted in filter.items():
        if type(name) is not str or not name or any(not part for part in name.split(".")):
            raise MemoryFilterError(filter, f"key {name!r} names no path (use 'a' or 'a.b', no empty parts)")
        path = tuple(name.split("."))
        ops = isinstance(wanted, Mapping) and any(type(k) is str and k.startswith("$") for k in wanted)
        if ops:
            for op, operand in wanted.items():
                if op not in OPERATORS:
                    raise MemoryFilterError(
                        filter, f"{op!r} is not an operator ({', '.join(sorted(OPERATORS))}; no mixing with keys)"
                    )
                out.append(Condition(path, cast(Operator, op), _operand(filter, operand)))
        else:
            out.append(Condition(path, "$eq", _operand(filter, wanted)))
    return tuple(out)


def _operand(filter: Any, value: Any) -> Any:
    try:
        return thaw(freeze(value, "filter"))
    except NotSerializableError as exc:
        raise MemoryFilterError(filter, str(exc)) from None


def _at(value: Any, path: tuple[str, ...]) -> Any:
    cur = value
    for part in path:
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return _MISSING
    return cur


def _number(x: Any) -> bool:
    return type(x) is not bool and isinstance(x, int | float)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, booleans only with booleans, containers whole."""
    if _number(a) and _number(b):
        return bool(a == b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, Sequence) and isinstance(b, Sequence):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return False


def holds(value: Mapping[str, Any], condition: Condition) -> bool:
    """Whether ``value`` passes ``condition``."""
    found = _at(value, condition.path)
    op, wanted = condition.op, condition.value
    if found is _MISSING:
        return op == "$ne"
    if op == "$eq":
        return same_json(found, wanted)
    if op == "$ne":
        return not same_json(found, wanted)
    if _number(found) and _number(wanted):
        pass
    elif not (type(found) is str and type(wanted) is str):
        return False
    if op == "$gt":
        return bool(found > wanted)
    if op == "$gte":
        return bool(found >= wanted)
    if op == "$lt":
        return bool(found < wanted)
    return bool(found <= wanted)


def matches(value: Mapping[str, Any], conditions: Sequence[Condition]) -> bool:
    """Whether ``value`` passes every condition."""
    return all(holds(value, c) for c in conditions)
