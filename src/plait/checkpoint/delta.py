"""How a channel value is stored: in full, or as a delta against the value stored before it.

A chat that appends one message per super-step must cost O(messages) bytes on disk, not
O(messages²). So when a list or dict channel changes, the store may keep only what changed
since the previous checkpoint's value of that channel:

* a list whose first ``n`` items are the previous list's items is stored as
  ``{"n": n, "a": [appended items]}``;
* a dict is stored as ``{"s": {key: new value, ...}, "d": [deleted keys]}``.

The decision is structural, made from the two values alone, so it needs no knowledge of the
channel's reducer and is safe for any reducer: the delta replays to exactly the new value.
A delta is only taken when it is smaller than half the value, and a chain of deltas ends
(the next write is a full value) when its bytes would exceed the size of the full value it
starts from, or when it reaches :data:`K_MAX` deltas. Total storage therefore stays within a
small constant factor of the bytes written, and reading any value replays at most ``K_MAX``
deltas.

Why identity for lists: plait values are frozen and reducers reuse the items they keep, so
"the prefix is the previous list" is an identity check at C speed (``map(operator.is_)``).
An equality check would be wrong here: ``1 == 1.0 == True`` in Python but not in JSON.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from plait._codec import decode_frozen, freeze_trusted
from plait._frozen import FrozenDict, FrozenList

__all__ = ["K_MAX", "Chain", "DeltaError", "apply", "diff", "encode", "replay"]

K_MAX: Final = 256
"""The most deltas between two full values of a channel."""

_MISSING: Final = object()
_LISTS = (list, FrozenList)
_DICTS = (dict, FrozenDict)


class DeltaError(ValueError):
    """A stored value or delta that cannot be replayed (damaged, foreign, or its base is gone)."""

    def __init__(self, key: Hashable, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"{key!r}: {reason}")


@dataclass(frozen=True, slots=True)
class Chain:
    """Where a channel's stored value sits in its delta chain; decides the next write."""

    depth: int
    """Deltas since the last full value (0: the value itself is full)."""
    delta_bytes: int
    """Bytes of those deltas."""
    full_bytes: int
    """Bytes of the full value the chain starts from."""
    size: int
    """Estimated bytes of the current value in full (exact when depth is 0)."""


def diff(prev: Any, new: Any) -> dict[str, Any] | None:
    """The delta that turns ``prev`` into ``new``, or None when no delta applies.

    Lists: only appends (``new`` starts with the very items of ``prev``). Dicts: keys set
    (added, or bound to another object) and keys deleted, when ``new`` keeps the order of
    ``prev``'s remaining keys (key order is part of what reads back).
    """
    if type(prev) in _LISTS and type(new) in _LISTS:
        n = len(prev)
        if len(new) >= n and all(map(operator.is_, new, prev)):
            return {"n": n, "a": new[n:]}
        return None
    if type(prev) in _DICTS and type(new) in _DICTS:
        deleted = [k for k in prev if k not in new]
        kept = [k for k in prev if k in new] if deleted else list(prev)
        if list(itertools.islice(new, len(kept))) != kept:
            return None  # keys reordered: replaying would not give back the same order
        get = prev.get
        changed = {k: v for k, v in new.items() if get(k, _MISSING) is not v}
        return {"s": changed, "d": deleted}
    return None


def encode(new: Any, prev: Any = _MISSING, chain: Chain | None = None) -> tuple[bytes, bool, Chain]:
    """Encode ``new`` for storage, as a delta against ``prev`` when that pays off.

    Args:
        new: the channel's new value.
        prev: the value stored before it in the same chain (omit when unknown).
        chain: where ``prev`` sits in its chain (None when unknown: a full value is written).

    Returns:
        ``(data, is_delta, chain)``: the JSON bytes to store, whether they are a delta against
        ``prev``, and the chain position of the new value.
    """
    if chain is not None and prev is not _MISSING and chain.depth < K_MAX:
        change = diff(prev, new)
        if change is not None:
            data = orjson.dumps(change)
            size = chain.size + len(data)
            if 2 * len(data) < size and chain.delta_bytes + len(data) <= chain.full_bytes:
                return data, True, Chain(chain.depth + 1, chain.delta_bytes + len(data), chain.full_bytes, size)
    data = orjson.dumps(new)
    return data, False, Chain(0, 0, len(data), len(data))


def apply(base: Any, delta: Any) -> Any:
    """The value a decoded delta makes of ``base`` (frozen)."""
    work = _working(base, delta, None)
    _apply_into(work, delta, None)
    return _frozen(work)


def replay(
    rows: Mapping[Hashable, tuple[Hashable | None, bytes]],
    wanted: Iterable[Hashable],
) -> dict[Hashable, Any]:
    """Rebuild stored values from their rows, sharing work between values of one chain.

    Args:
        rows: ``key -> (base key or None for a full value, stored bytes)``; every base a
            wanted value depends on must be present.
        wanted: the keys whose values are needed. Keys are processed in sorted order, so
            when keys sort oldest first (checkpoint ids do) each chain is replayed once.

    Returns:
        ``key -> frozen value`` for every wanted key (and possibly a few more).

    Raises:
        DeltaError: a row that is not JSON, a delta of the wrong shape or whose base is
            missing, or a cycle of bases.
    """
    memo: dict[Hashable, Any] = {}
    targets = set(wanted)
    for key in sorted(targets, key=_sort_key):
        if key in memo:
            continue
        path: list[Hashable] = []  # deltas, newest first
        cursor: Hashable | None = key
        start: Any = _MISSING
        while True:
            if cursor in memo:
                start = memo[cursor]
                break
            row = rows.get(cursor)
            if row is None:
                raise DeltaError(path[-1] if path else key, f"its base {cursor!r} is not stored")
            base, data = row
            if base is None:
                start = _decode(cursor, data, frozen=True)
                memo[cursor] = start
                break
            path.append(cursor)
            if len(path) > len(rows):
                raise DeltaError(key, "its chain of deltas loops")
            cursor = base
        if not path:
            continue
        work: Any = None
        for step in reversed(path):
            delta = _decode(step, rows[step][1], frozen=False)
            if work is None:
                work = _working(start, delta, step)
            _apply_into(work, delta, step)
            if step in targets:
                memo[step] = _frozen(work)
    return memo


def _sort_key(key: Hashable) -> str:
    return repr(key) if not isinstance(key, tuple) else "\x00".join(map(str, key[::-1]))


def _decode(key: Hashable, data: bytes, *, frozen: bool) -> Any:
    try:
        return decode_frozen(data) if frozen else orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise DeltaError(key, f"stored value is not JSON ({exc})") from None


def _working(base: Any, delta: Any, key: Hashable | None) -> Any:
    """A mutable copy of ``base`` to apply deltas to."""
    if type(delta) is dict and "n" in delta and type(base) in _LISTS:
        return list(base)
    if type(delta) is dict and "s" in delta and type(base) in _DICTS:
        return dict(base)
    raise DeltaError(
        key,
        f"a delta of shape {sorted(delta) if type(delta) is dict else type(delta).__name__} "
        f"cannot apply to a {type(base).__name__}",
    )


def _apply_into(work: Any, delta: Any, key: Hashable | None) -> None:
    try:
        if type(work) is list:
            n, items = delta["n"], delta["a"]
            if type(n) is not int or not 0 <= n <= len(work) or type(items) is not list:
                raise DeltaError(key, "malformed list delta")
            del work[n:]
            work.extend(freeze_trusted(items))
            return
        changed, deleted = delta["s"], delta["d"]
        if type(changed) is not dict or type(deleted) is not list:
            raise DeltaError(key, "malformed dict delta")
        for k in deleted:
            work.pop(k, None)
        for k, v in changed.items():
            work[k] = freeze_trusted(v)
    except (KeyError, TypeError) as exc:
        raise DeltaError(key, f"malformed delta ({exc!r})") from None


def _frozen(work: Any) -> Any:
    return FrozenList(work) if type(work) is list else FrozenDict(work)
