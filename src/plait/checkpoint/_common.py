"""Logic every backend shares: metadata filters, what ``prune`` must keep, and when a
blocking call may run on the event loop's own thread."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from plait.checkpoint._match import matches as contains
from plait.checkpoint.model import Status, ThreadInfo, check_listing, decode_cursor
from plait.errors import CheckpointCorruptError, CheckpointNotFoundError

T = TypeVar("T")

__all__ = [
    "FILTER_KEY",
    "check_filter",
    "check_prune",
    "cycle_error",
    "keep_set",
    "matches",
    "page_threads",
    "walk_lineage",
]

FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse metadata filter keys that are not plain identifiers.

    SQL backends pass keys as parameters anyway; validating them keeps every backend's
    behaviour identical and the error early and clear.
    """
    if not filter:
        return
    for key in filter:
        if not isinstance(key, str) or not FILTER_KEY.match(key):
            raise ValueError(
                f"history filter key {key!r} is not allowed: use a metadata key made of letters, "
                "digits and '_' (at most 64), such as 'source' or 'step'"
            )


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(k in metadata and metadata[k] == v for k, v in filter.items())


def check_prune(keep_last: int | None, newer_than: str | None) -> None:
    """Refuse a ``prune`` that does not say what to keep in exactly one way.

    Raises:
        ValueError: neither or both of ``keep_last`` and ``newer_than``, or ``keep_last`` < 1.
    """
    if (keep_last is None) == (newer_than is None):
        raise ValueError(
            "prune() takes either keep_last= (how many checkpoints of each branch to keep) or "
            "newer_than= (a checkpoint id: drop everything written after it), not both or neither"
        )
    if keep_last is not None and keep_last < 1:
        raise ValueError("prune(keep_last=...) must keep at least 1 checkpoint")


def keep_set(
    parents: Mapping[str, str | None],
    keep_last: int | None,
    newer_than: str | None = None,
    *,
    thread_id: str = "",
    namespace: str = "",
    branches: bool = True,
) -> set[str]:
    """The checkpoint ids ``prune`` keeps.

    With ``keep_last``: the ``keep_last`` newest of every branch head's lineage. A branch
    head is a checkpoint no other checkpoint names as parent; the thread's head is one of
    them, and so is the tip of every time-travel branch.

    With ``newer_than``: every checkpoint not newer than it, in the order that makes the
    newest checkpoint the thread's head (the id order), so that it is the head again and
    what was written after it is gone, branches made before it included.

    Without ``branches``, only the lineage of the head that remains (the greatest id kept) is
    kept of that: every other branch goes, time-travel branches included (what retention's
    ``keep_latest`` asks for).

    Raises:
        CheckpointNotFoundError: ``newer_than`` is not a checkpoint of the thread.
    """
    check_prune(keep_last, newer_than)
    if newer_than is not None:
        if newer_than not in parents:
            raise CheckpointNotFoundError(thread_id, newer_than, namespace)
        kept = {cid for cid in parents if cid <= newer_than}
    else:
        kept = _keep_last(parents, keep_last)
    return kept if branches else _head_lineage(parents, kept)


def _head_lineage(parents: Mapping[str, str | None], kept: set[str]) -> set[str]:
    """The ids of ``kept`` on the lineage of its greatest id (the head after a prune)."""
    out: set[str] = set()
    cursor = max(kept) if kept else None
    while cursor is not None and cursor in kept and cursor not in out:
        out.add(cursor)
        cursor = parents.get(cursor)
    return out


def _keep_last(parents: Mapping[str, str | None], keep_last: int | None) -> set[str]:
    """The ``keep_last`` newest of every branch head's lineage."""
    assert keep_last is not None
    children = {p for p in parents.values() if p is not None}
    keep: set[str] = set()
    for head in (cid for cid in parents if cid not in children):
        cursor: str | None = head
        n = 0
        while cursor is not None and n < keep_last and cursor in parents:
            keep.add(cursor)
            cursor = parents[cursor]
            n += 1
    return keep


def walk_lineage(
    thread_id: str,
    items: Mapping[str, T],
    *,
    before: str | None,
    limit: int | None,
    filter: Mapping[str, Any] | None,
    parent_of: Callable[[T], str | None],
    metadata_of: Callable[[T], Mapping[str, Any]],
) -> list[T]:
    """The ``history`` walk over a thread held in memory, newest first: from the head (the
    greatest id) or from the parent of ``before``, through parent ids, keeping the items
    whose metadata matches ``filter``, at most ``limit``.

    Raises:
        CheckpointCorruptError: the walk comes back to a checkpoint it passed (a parent
            cycle, in foreign or damaged data) before it has ``limit`` items.
    """
    if not items:
        return []
    if before is not None:
        start = items.get(before)
        cursor = parent_of(start) if start is not None else None
    else:
        cursor = max(items)
    out: list[T] = []
    passed: set[str] = set()
    if limit is not None and limit <= 0:
        return out
    while cursor is not None:
        item = items.get(cursor)
        if item is None:
            break
        if matches(metadata_of(item), filter):
            out.append(item)
            if limit is not None and len(out) >= limit:
                break
        passed.add(cursor)
        parent = parent_of(item)
        if parent in passed:
            raise cycle_error(thread_id, cursor, parent)
        cursor = parent
    return out


def cycle_error(thread_id: str, checkpoint_id: str, parent_id: str | None) -> CheckpointCorruptError:
    """The error for a lineage that loops: ``checkpoint_id`` names as its parent
    ``parent_id``, which the walk reached it from."""
    return CheckpointCorruptError(
        thread_id,
        checkpoint_id,
        f"its parent {parent_id!r} is also one of its descendants, so its lineage runs in a cycle",
    )


def page_threads(
    infos: Iterable[ThreadInfo],
    *,
    status: Status | None,
    limit: int | None,
    before: str | None,
    prefix: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    metadata_of: Callable[[ThreadInfo], Any] | None = None,
) -> list[ThreadInfo]:
    """A page of a listing held in memory (the memory and file backends): newest first, the
    threads after the cursor ``before``, of ``status``, whose head's metadata
    (``metadata_of(info)``) matches ``metadata``, at most ``limit``; as SQL pages it.

    Raises:
        ValueError: an unknown status, a limit below 1, a ``before`` that is not a cursor, or
            a ``metadata`` that is not a JSON object.
    """
    check_listing(status, limit, prefix, metadata)
    after = decode_cursor(before) if before is not None else None
    out: list[ThreadInfo] = []
    for info in sorted(infos, key=lambda t: (t.updated_at, t.namespace, t.thread_id), reverse=True):
        if after is not None and (info.updated_at, info.namespace, info.thread_id) >= after:
            continue
        if status is not None and info.status != status:
            continue
        if prefix and not info.thread_id.startswith(prefix):
            continue
        if metadata and (metadata_of is None or not contains(metadata_of(info), metadata)):
            continue
        out.append(info)
        if limit is not None and len(out) >= limit:
            break
    return out
