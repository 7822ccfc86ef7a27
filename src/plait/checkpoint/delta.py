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

Stores that look blobs up by key (the SQL backends) link list chains further, with
:func:`encode_linked`: every :data:`K_STEP`-th append is stored as the items appended since
the chain's last *anchor* (its full value, or the previous such write), with that anchor as
its base. Reading a value then walks at most ``K_STEP`` appends back to an anchor, then
anchor to anchor: a 500-step chat's middle value is ~25 rows instead of ~125, so a read
costs about what reading the value whole does. Each item is stored twice (in its step's
delta and in one anchor), which is what the full values of a plain chain cost, so a linked
list chain needs no full value but its first until :data:`K_MAX` rows would be on the path.

Why identity for lists: plait values are frozen and reducers reuse the items they keep, so
"the prefix is the previous list" is an identity check at C speed (``map(operator.is_)``).
An equality check would be wrong here: ``1 == 1.0 == True`` in Python but not in JSON.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

import orjson

from plait._codec import freeze_decoded
from plait._frozen import FrozenDict, FrozenList

__all__ = [
    "K_MAX",
    "K_STEP",
    "Chain",
    "DeltaError",
    "apply",
    "chain_of",
    "diff",
    "encode",
    "encode_linked",
    "replay",
    "unresolved",
]

K_MAX: Final = 256
"""The most deltas between two full values of a channel; in a linked chain, the most rows
on the path from a value to its full value."""

K_STEP: Final = 16
"""In a linked list chain (:func:`encode_linked`), the appends between two anchors."""

_MISSING: Final = object()
_LISTS = (list, FrozenList)
_DICTS = (dict, FrozenDict)
_CONTAINERS: Final = frozenset((dict, list))


RowKey = TypeVar("RowKey", bound=Hashable)
"""A row's key: a checkpoint id, or the SQL backends' ``(channel, blob id)``; a reader's
rows and the keys it wants are of one kind, whatever it is."""


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
    anchor: str | None = None
    """Linked list chains only: the key of the chain's last anchor (None: not linked)."""
    anchor_len: int = 0
    """Items of the anchor's value."""
    anchor_size: int = 0
    """Estimated bytes of the anchor's value in full."""
    since_anchor: int = 0
    """Appends stored since the anchor; ``depth - since_anchor`` anchors lie below it."""


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


def encode_linked(
    new: Any, key: str, prev: Any = _MISSING, prev_key: str | None = None, chain: Chain | None = None
) -> tuple[bytes, str | None, Chain]:
    """Encode ``new`` (stored under ``key``) for a store that looks blobs up by key.

    Dicts and other values go as :func:`encode` would store them. A list whose full value
    is written becomes an anchor, and the appends after it are linked: each is a delta
    against ``prev_key``, except every :data:`K_STEP`-th, which holds all the items since
    the anchor, against the anchor, and is the next anchor. An anchor's items are the
    anchor's value as it was: every write since it was an append of the very items before.

    Args:
        new: the channel's new value.
        key: where ``new`` is stored (an anchor's key is remembered in the chain).
        prev: the value stored before it in the same chain, at ``prev_key``.
        chain: where ``prev`` sits in its chain (None when unknown: a full value is written).

    Returns:
        ``(data, base key or None for a full value, chain position of the new value)``.
    """
    if chain is None or prev is _MISSING or prev_key is None:
        return _full(new, key)
    if chain.anchor is None or type(new) not in _LISTS or type(prev) not in _LISTS:
        data, is_delta, after = encode(new, prev, chain)
        if is_delta:
            return data, prev_key, after
        return _full(new, key)
    n = len(prev)
    if len(new) < n or not all(map(operator.is_, new, prev)):
        return _full(new, key)  # not an append: the chain ends
    anchors = chain.depth - chain.since_anchor
    if chain.since_anchor + 1 < K_STEP:
        data = orjson.dumps({"n": n, "a": new[n:]})
        size = chain.size + len(data)
        if 2 * len(data) < size:
            after = replace(chain, depth=chain.depth + 1, size=size, since_anchor=chain.since_anchor + 1)
            return data, prev_key, after
    elif anchors + 1 + K_STEP <= K_MAX:
        a = chain.anchor_len
        data = orjson.dumps({"k": 1, "n": a, "a": new[a:]})  # "k": an anchor (see chain_of)
        size = chain.anchor_size + len(data)
        if 2 * len(data) < size:
            after = Chain(anchors + 1, 0, chain.full_bytes, size, key, len(new), size, 0)
            return data, chain.anchor, after
    return _full(new, key)


def chain_of(
    rows: Mapping[RowKey, tuple[RowKey | None, bytes]],
    key: RowKey,
    value: Any,
    blob_id: Callable[[RowKey], str],
) -> Chain | None:
    """Where the stored value ``value`` (row ``key``) sits in its chain, from the rows a read
    replayed it from; None when they do not hold its whole chain.

    A process that reads a thread's head without having written it (a run resuming in a
    new process, or on another machine) can then store the next value as a delta on it
    instead of in full: every resume would otherwise rewrite every list whole, O(N²) bytes
    for a thread resumed at every step. A list goes on as the linked chain it is in when
    its last anchor is found within reach (:func:`_linked_position`); anything else, and a
    list whose anchor is not found, as :func:`encode` continues a chain.

    Args:
        blob_id: the blob id of a row key (what :attr:`Chain.anchor` holds).
    """
    path: list[RowKey] = []
    sizes: list[int] = []
    cursor: RowKey | None = key
    while cursor is not None:
        row = rows.get(cursor)
        if row is None or len(path) > K_MAX:
            return None
        path.append(cursor)
        sizes.append(len(row[1]))
        cursor = row[0]
    full, total = sizes[-1], sum(sizes)
    if type(value) in _LISTS:
        linked = _linked_position(rows, path, len(value))
        if linked is not None:
            j, anchor_len = linked
            return Chain(len(path) - 1, total - full, full, total, blob_id(path[j]), anchor_len, sum(sizes[j:]), j)
    return Chain(len(path) - 1, total - full, full, total)


_ANCHOR_MARK: Final = b'{"k":1,'
"""How an anchor's stored delta starts (``encode_linked`` writes ``"k"`` first)."""


def _linked_position(
    rows: Mapping[RowKey, tuple[RowKey | None, bytes]], path: list[RowKey], length: int
) -> tuple[int, int] | None:
    """``(index on path, item count)`` of the last anchor of a list's chain, when it lies
    within ``2 * K_STEP`` rows of the top and every row above it is an append of the very
    items below it (checked from the stored deltas, so the anchor's value is a prefix of the
    value): then a writer may link new appends to it. None otherwise."""
    for j, key in enumerate(path[: 2 * K_STEP]):
        base, data = rows[key]
        if base is not None and not data.startswith(_ANCHOR_MARK):
            continue
        try:
            decoded = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if base is None:
            if type(decoded) is not list:
                return None
            anchor_len = len(decoded)
        else:
            n, items = decoded.get("n"), decoded.get("a")
            if type(n) is not int or type(items) is not list:
                return None
            anchor_len = n + len(items)
        expect = anchor_len
        for above in reversed(path[:j]):
            try:
                step = orjson.loads(rows[above][1])
            except orjson.JSONDecodeError:
                return None
            if type(step) is not dict or step.get("n") != expect or type(step.get("a")) is not list:
                return None  # not an append of the very items below it
            expect += len(step["a"])
        return (j, anchor_len) if expect == length else None
    return None


def _full(new: Any, key: str) -> tuple[bytes, None, Chain]:
    """A full value; a list's is the anchor of the linked chain it starts."""
    data = orjson.dumps(new)
    if type(new) in _LISTS:
        return data, None, Chain(0, 0, len(data), len(data), key, len(new), len(data), 0)
    return data, None, Chain(0, 0, len(data), len(data))


def apply(base: Any, delta: Any) -> Any:
    """The value a decoded delta makes of ``base`` (frozen)."""
    work = _working(base, delta, None)
    _apply_into(work, delta, None)
    return _frozen(work)


def replay(  # noqa: PLR0912 - every delta kind in one replay loop, the hot read path
    rows: Mapping[RowKey, tuple[RowKey | None, bytes]],
    wanted: Iterable[RowKey],
) -> dict[RowKey, Any]:
    """Rebuild stored values from their rows, sharing work between values of one chain.

    Each row is decoded once, into plain lists and dicts; deltas are applied to a plain
    working copy, and only what a wanted value holds is frozen, each item once. Why: the
    cost of a read is dominated by decoding and freezing, so a chain of ``K`` deltas must
    not cost ``K`` freezes of the whole value, and a history of ``N`` values of one chain
    shares the frozen items (each value is a new list of the same item objects).

    Rows are decoded one by one: decoding them as one joined JSON array was measured no
    faster (the join copies every byte), and a damaged row could then shift its neighbours
    into the wrong values instead of failing.

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
    memo: dict[RowKey, Any] = {}
    # The working copy left by the last value computed on each chain, keyed by that value's
    # key: when the next key continues the chain (a history, oldest first), it goes on from
    # there instead of copying the value again, so N values of a chain cost N list copies
    # (the values themselves) and no more.
    live: dict[RowKey, tuple[Any, int]] = {}
    targets = set(wanted)
    for key in _in_order(targets):
        if key in memo:
            continue
        row = rows.get(key)
        if row is not None and row[0] in live:
            # The next value of a chain just replayed (every value of a history but the
            # first): the common delta, an append to a list, is applied here in one go.
            work, fresh = live.pop(row[0])
            if fresh < 0 and type(work) is list:
                change = _decode(key, row[1])
                if type(change) is dict and "n" in change:
                    n, items = change["n"], change.get("a")
                    if type(n) is int and n == len(work) and type(items) is list:
                        work += _freeze_items(items)
                        memo[key] = FrozenList(work)
                        live[key] = work, -1
                        continue
            live[key] = _replay_path(rows, [key], work, fresh, targets, memo)
            continue
        path: list[RowKey] = []  # deltas, newest first
        cursor = key
        while cursor not in memo:
            row = rows.get(cursor)
            if row is None:
                raise DeltaError(path[-1] if path else key, f"its base {cursor!r} is not stored")
            base = row[0]
            if base is None:
                break
            path.append(cursor)
            if len(path) > len(rows):
                raise DeltaError(key, "its chain of deltas loops")
            cursor = base
        if not path:
            memo[key] = _freeze_value(_decode(key, rows[key][1]))
            continue
        if cursor in live:
            work, fresh = live.pop(cursor)
        elif cursor in memo:
            work, fresh = memo[cursor], -1
        else:
            work, fresh = _decode(cursor, rows[cursor][1]), 0  # decoded just now: work on it
            if cursor in targets:
                work = memo[cursor] = _freeze_value(work)
                fresh = -1
        live[key] = _replay_path(rows, path, work, fresh, targets, memo)
    return memo


def unresolved(rows: Mapping[RowKey, tuple[RowKey | None, bytes]], wanted: Iterable[RowKey]) -> set[RowKey]:
    """The keys, or bases of keys, in ``wanted``'s chains that ``rows`` lacks.

    A reader that fetched rows by a cheap guess (an id range) fetches these, and the chains
    below them, before :func:`replay`; a loop is left for :func:`replay` to report.
    """
    done: set[RowKey] = set()
    out: set[RowKey] = set()
    for key in wanted:
        path: list[RowKey] = []
        cursor: RowKey | None = key
        while cursor is not None and cursor not in done:
            row = rows.get(cursor)
            if row is None:
                out.add(cursor)
                break
            path.append(cursor)
            if len(path) > len(rows):
                break
            cursor = row[0]
        done.update(path)
    return out


def _replay_path(  # noqa: PLR0912 - every delta kind in one replay loop, the hot read path
    rows: Mapping[RowKey, tuple[RowKey | None, bytes]],
    path: list[RowKey],
    work: Any,
    fresh: int,
    targets: set[RowKey],
    memo: dict[RowKey, Any],
) -> tuple[Any, int]:
    """Apply the deltas of ``path`` (newest first) to ``work``, memoizing each target's value.

    ``work`` is the value to start from: a frozen one (``fresh == -1``), copied before the
    first change, or a mutable one this call may change. ``fresh`` says which of its parts
    are frozen: ``-1`` all of them; else, for a list, the items before that index (those
    after were decoded and are frozen when a target needs them), and for a dict, none.

    Returns:
        The working copy and its ``fresh`` after the last delta, to go on from.
    """
    for step in reversed(path):
        delta = _decode(step, rows[step][1])
        t = type(work)
        if t is list and fresh >= 0 and type(delta) is dict and "n" in delta:
            n, items = delta["n"], delta.get("a")
            if type(n) is int and n == len(work) and type(items) is list:  # the usual append
                work += items
                if step in targets:
                    work[fresh:] = _freeze_items(itertools.islice(work, fresh, None))
                    fresh = -1
                    memo[step] = FrozenList(work)
                continue
        if type(delta) is dict and "n" in delta and (t is list or t is FrozenList):
            if t is not list:
                work = work[:]  # a slice copies at C speed; list(FrozenList) would iterate
            if fresh < 0:
                fresh = len(work)
            n, items = _list_delta(delta, len(work), step)
            if n < len(work):
                del work[n:]
                fresh = min(fresh, n)
            work += items
        elif type(delta) is dict and "n" not in delta and "s" in delta and (t is dict or t is FrozenDict):
            if t is not dict:
                work = dict(work)
            elif fresh >= 0:  # the decoded base's own values: freeze them once
                for k, v in work.items():
                    work[k] = _freeze_value(v)
            fresh = -1
            _dict_into(work, delta, step, frozen=True)
        else:
            raise _mismatch(work, delta, step)
        if step in targets:
            if type(work) is list:
                if fresh < len(work):
                    work[fresh:] = _freeze_items(itertools.islice(work, fresh, None))
                fresh = -1
                memo[step] = FrozenList(work)
            else:
                memo[step] = FrozenDict(work)
    return work, fresh


def _in_order(keys: set[RowKey]) -> list[RowKey]:
    """``keys`` oldest first: by blob id, then channel, for the ``(channel, blob id)`` keys of
    the SQL backends (checkpoint ids sort by time); any other keys by their text."""
    try:
        return sorted(keys, key=_swap)
    except TypeError:  # keys that do not compare with each other
        return sorted(keys, key=_sort_key)


def _swap(key: Hashable) -> tuple[Any, ...]:
    return key[::-1] if type(key) is tuple else ("", repr(key))


def _sort_key(key: Hashable) -> str:
    return repr(key) if not isinstance(key, tuple) else "\x00".join(map(str, key[::-1]))


def _decode(key: Hashable, data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise DeltaError(key, f"stored value is not JSON ({exc})") from None


def _freeze_items(items: Iterable[Any]) -> list[Any]:
    """:func:`_freeze_value` of each item, the usual flat object (a chat message) inline.

    Items that are all flat objects (a chat's messages) are checked together, the types of
    all their values in one pass at C speed: a check per item cost more than its freezing.
    """
    if type(items) is not list:
        items = list(items)
    if set(map(type, items)) == _DICT_ONLY and _CONTAINERS.isdisjoint(
        map(type, itertools.chain.from_iterable(map(dict.values, items)))
    ):
        return list(map(FrozenDict, items))
    flat = _CONTAINERS.isdisjoint
    return [FrozenDict(v) if type(v) is dict and flat(map(type, v.values())) else _freeze_value(v) for v in items]


_DICT_ONLY: Final = {dict}


def _freeze_value(value: Any) -> Any:
    """Freeze decoded JSON; a flat object (the usual chat message) takes a fast path."""
    t = type(value)
    if t is dict:
        if _CONTAINERS.isdisjoint(map(type, value.values())):
            return FrozenDict(value)
        return freeze_decoded(value)
    if t is list:
        return FrozenList([_freeze_value(v) for v in value])
    return value


def _working(base: Any, delta: Any, key: Hashable | None) -> Any:
    """A mutable copy of ``base`` to apply ``delta`` to (raises if it cannot apply)."""
    if type(delta) is dict and "n" in delta and type(base) in _LISTS:
        return base[:]  # a slice copies at C speed; list(FrozenList) would iterate
    if type(delta) is dict and "s" in delta and type(base) in _DICTS:
        return dict(base)
    raise _mismatch(base, delta, key)


def _mismatch(base: Any, delta: Any, key: Hashable | None) -> DeltaError:
    return DeltaError(
        key,
        f"a delta of shape {sorted(delta) if type(delta) is dict else type(delta).__name__} "
        f"cannot apply to a {type(base).__name__}",
    )


def _list_delta(delta: Any, length: int, key: Hashable | None) -> tuple[int, list[Any]]:
    """The ``(n, appended items)`` of a decoded list delta, checked against the list's length."""
    try:
        n, items = delta["n"], delta["a"]
    except (KeyError, TypeError) as exc:
        raise DeltaError(key, f"malformed delta ({exc!r})") from None
    if type(n) is not int or not 0 <= n <= length or type(items) is not list:
        raise DeltaError(key, "malformed list delta")
    return n, items


def _dict_into(work: dict[str, Any], delta: Any, key: Hashable | None, *, frozen: bool) -> None:
    """Apply a decoded dict delta to ``work`` (its new values frozen when ``frozen``)."""
    try:
        changed, deleted = delta["s"], delta["d"]
    except (KeyError, TypeError) as exc:
        raise DeltaError(key, f"malformed delta ({exc!r})") from None
    if type(changed) is not dict or type(deleted) is not list:
        raise DeltaError(key, "malformed dict delta")
    try:
        for k in deleted:
            work.pop(k, None)
    except TypeError as exc:  # an unhashable "key" in foreign data
        raise DeltaError(key, f"malformed delta ({exc!r})") from None
    for k, v in changed.items():
        work[k] = _freeze_value(v) if frozen else v


def _apply_into(work: Any, delta: Any, key: Hashable | None) -> None:
    if type(work) is list:
        n, items = _list_delta(delta, len(work), key)
        del work[n:]
        work += _freeze_items(items)
    else:
        _dict_into(work, delta, key, frozen=True)


def _frozen(work: Any) -> Any:
    return FrozenList(work) if type(work) is list else FrozenDict(work)
