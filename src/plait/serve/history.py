"""A thread's history as the LangGraph API lists it: every branch, newest first.

plait's own ``history()`` walks one branch, the head's. The API's history holds the thread's
every checkpoint ordered by id (newest first), so a client that edited a message (a fork from
the parent of the state that held it) still sees the branch it left, and a chat UI offers
"1 / 2" between them. The thread's shape comes from :meth:`Checkpointer.atree` (ids and
parents, no state); states are then read a branch at a time, each tip with its pending
writes (its interrupts) and its ancestors by one history walk, until ``limit`` are found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint

__all__ = ["every_branch", "holds"]


async def every_branch(
    checkpointer: Checkpointer,
    thread_id: str,
    *,
    limit: int,
    before: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[Checkpoint]:
    """At most ``limit`` of the thread's checkpoints, every branch's, newest first: those
    older than ``before`` (an id), whose metadata holds every ``metadata`` item."""
    tree = await checkpointer.atree(thread_id)
    ids = sorted((i for i in tree if before is None or i < before), reverse=True)
    read: dict[str, Checkpoint] = {}
    out: list[Checkpoint] = []
    for cid in ids:
        if len(out) >= limit:
            break
        if cid not in read:
            read.update(await _branch_from(checkpointer, thread_id, cid, None if metadata else limit - len(out)))
        cp = read.get(cid)
        if cp is not None and holds(cp, metadata):
            out.append(cp)
    return out


def holds(cp: Checkpoint, metadata: Mapping[str, Any] | None) -> bool:
    """Whether the checkpoint's metadata has every item of ``metadata`` (the API's filter)."""
    return all(cp.metadata.get(k) == v for k, v in (metadata or {}).items())


async def _branch_from(
    checkpointer: Checkpointer, thread_id: str, tip: str, limit: int | None
) -> dict[str, Checkpoint]:
    """``tip`` with its pending writes and up to ``limit`` (None: all) of its ancestors."""
    first = await checkpointer.aget(thread_id, tip)
    if first is None:  # deleted meanwhile
        return {}
    rest = await checkpointer.ahistory(thread_id, before=tip, limit=None if limit is None else max(limit - 1, 0))
    return {cp.id: cp for cp in (first, *rest)}
