"""Forking: a checkpoint copied as the root of another thread.

One implementation for every caller (``CompiledGraph.fork`` folds edits through the graph's
reducers first; ``plait fork`` without edits needs no graph at all), so a fork means the
same thing everywhere.

A fork creates a thread: the target must have no checkpoint yet. The commit is fenced
(``expect_head=None``), so this holds atomically even against a concurrent fork or run into
the same target; a thread that already exists is refused with
:class:`~plait.errors.ConcurrentUpdateError` and nothing is stored. (Before fences, a fork
into an existing thread added a second, unrelated root to it, whose newest checkpoint then
silently became the thread's head.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Fence, WritesBatch, new_checkpoint_id

__all__ = ["SUBGRAPH_EFFECT", "copy_thread", "fork_checkpoint"]

SUBGRAPH_EFFECT = "__subgraph_interrupt:"
"""Effects recorded under names with this prefix are no effects on the outside world: which
subgraph interrupt a parent task's interrupt stands for (see :mod:`plait.engine.subgraph`).
A fork keeps them, so that a forked pause resumes its subgraph."""

_FORK_OWNER = f"fork:{uuid.uuid4().hex}"
"""The fence owner of a fork: a name no lease is ever taken under (one per process), so any
run's unexpired lease on the target refuses the fork."""


async def fork_checkpoint(
    checkpointer: Checkpointer,
    src: Checkpoint,
    target_thread: str,
    *,
    values: Mapping[str, Any] | None = None,
    versions: Mapping[str, int] | None = None,
    metadata: Mapping[str, Any] | None = None,
    edited: Sequence[str] = (),
    checkpoint_id: str | None = None,
) -> str:
    """Store ``src`` (with ``values``/``versions`` in place of its own, when given) as a new
    root checkpoint (no parent, source ``fork``) of ``target_thread``; return its id, which
    is ``checkpoint_id`` when given (a caller that named the edits' messages by it).

    The source is never modified. The fork keeps the source's next tasks, join barriers,
    finished results, interrupts and resume values, but not its effects ledger: the fork's
    tasks get new idempotency keys, so an effect recorded for the source is not the fork's
    to skip (except the subgraph bookkeeping of :data:`SUBGRAPH_EFFECT`).

    Raises:
        ConcurrentUpdateError: ``target_thread`` already has checkpoints.
        ThreadBusyError: a run holds ``target_thread``.
    """
    cid = checkpoint_id or new_checkpoint_id()
    meta: dict[str, Any] = {
        **{k: v for k, v in src.metadata.items() if k in ("graph", "reducers", "graph_name", "graph_version")},
        **(metadata or {}),
        "source": "fork",
        "step": src.step,
        "forked_from": {"thread_id": src.thread_id, "checkpoint_id": src.id},
    }
    if edited:
        meta["writes"] = {"fork": list(edited)}
    cp = Checkpoint(
        thread_id=target_thread,
        namespace=src.namespace,
        id=cid,
        parent_id=None,
        step=src.step,
        values=dict(src.values if values is None else values),
        versions=dict(src.versions if versions is None else versions),
        next_tasks=src.next_tasks,
        barriers=dict(src.barriers),
        metadata=meta,
        created_at=time.time(),
    )
    carried = tuple(w for w in src.pending_writes if w.kind != "effect" or w.key.startswith(SUBGRAPH_EFFECT))
    checkpoints = [CheckpointWrite(checkpoint=cp, changed=frozenset(cp.values))]
    writes = (
        [WritesBatch(thread_id=target_thread, namespace=src.namespace, checkpoint_id=cid, writes=carried)]
        if carried
        else []
    )
    await checkpointer.acommit(checkpoints=checkpoints, writes=writes, fence=Fence(owner=_FORK_OWNER, expect_head=None))
    return cid


async def copy_thread(checkpointer: Checkpointer, source: str, target: str, *, namespace: str = "") -> int:
    """Copy ``source``'s history (its lineage from the root to the head, with the ids, times
    and metadata as stored, and the head's pending writes: its interrupts and finished
    results) into the new thread ``target``, in one fenced commit; returns how many
    checkpoints were copied (0: no such source, nothing written). Unlike a fork, the copy
    has the whole past, so it can be branched from anywhere as the source can.

    Raises:
        ConcurrentUpdateError: ``target`` already has checkpoints.
        ThreadBusyError: a run holds ``target``.
    """
    lineage = list(reversed(await checkpointer.ahistory(source, namespace=namespace)))
    if not lineage:
        return 0
    head = await checkpointer.aget(source, lineage[-1].id, namespace=namespace)
    checkpoints: list[CheckpointWrite] = []
    parent: Checkpoint | None = None
    for cp in lineage:
        copied = Checkpoint(
            thread_id=target, namespace=namespace, id=cp.id, parent_id=cp.parent_id, step=cp.step,
            values=cp.values, versions=cp.versions, next_tasks=cp.next_tasks, barriers=cp.barriers,
            metadata=cp.metadata, created_at=cp.created_at,
        )  # fmt: skip
        changed = frozenset(k for k, v in cp.values.items() if parent is None or parent.values.get(k, _NONE) != v)
        checkpoints.append(CheckpointWrite(checkpoint=copied, changed=changed))
        parent = cp
    carried = head.pending_writes if head is not None else ()
    writes = [WritesBatch(thread_id=target, namespace=namespace, checkpoint_id=lineage[-1].id, writes=carried)]
    await checkpointer.acommit(
        checkpoints=checkpoints, writes=writes if carried else [], fence=Fence(owner=_FORK_OWNER, expect_head=None)
    )
    return len(checkpoints)


_NONE = object()
