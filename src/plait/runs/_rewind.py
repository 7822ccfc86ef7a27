"""Rolling a thread back to the checkpoint a stopped run started from (``multitask="rollback"``).

The checkpointer API has no "drop the checkpoints after C", so the thread is rewritten: its
head's lineage up to C is read, the thread is deleted, and that lineage is committed back in
one fenced commit (as ``plait import --replace`` does), so a reader sees either the old thread
or the rolled-back one. It runs inside the new run's job, which holds the thread's
Procrastinate lock: no other run of the thread runs meanwhile. Checkpoints off the head's
lineage (time-travel branches made after C) go too; those before C are not carried either,
as the checkpointer API cannot list them.
"""

from __future__ import annotations

import uuid

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import CheckpointWrite, Fence, WritesBatch

__all__ = ["rewind"]


async def rewind(store: Checkpointer, thread_id: str, namespace: str, to: str | None) -> int:
    """Leave ``thread_id`` with the lineage of checkpoint ``to`` only (None: no checkpoint at
    all); returns how many checkpoints were dropped."""
    head = await store.aget(thread_id, namespace=namespace)
    if head is None or head.id == to:
        return 0
    lineage = list(reversed(await store.ahistory(thread_id, namespace=namespace)))  # oldest first
    ids = [cp.id for cp in lineage]
    keep = [] if to is None or to not in ids else lineage[: ids.index(to) + 1]
    last = await store.aget(thread_id, to, namespace=namespace) if keep else None  # with its pending writes
    await store.adelete_thread(thread_id, namespace=namespace)
    if not keep:
        return len(lineage)
    writes: list[CheckpointWrite] = []
    batches: list[WritesBatch] = []
    parent = None
    for cp in keep:
        changed = {k for k, v in cp.values.items() if parent is None or parent.values.get(k, ...) != v}
        writes.append(CheckpointWrite(checkpoint=cp, changed=frozenset(changed)))
        parent = cp
    if last is not None and last.pending_writes:
        batches.append(
            WritesBatch(thread_id=thread_id, namespace=namespace, checkpoint_id=last.id, writes=last.pending_writes)
        )
    fence = Fence(owner=f"rollback:{uuid.uuid4().hex}", expect_head=None)
    await store.acommit(checkpoints=writes, writes=batches, fence=fence)
    return len(lineage) - len(keep)
