"""Checkpoints written straight to a store, with the metadata a run records (``timings``,
``owner``) or any other: what the timeline tests read back without running a graph."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, new_checkpoint_id


def write_step(
    saver: Checkpointer,
    thread: str,
    updates: Mapping[str, Any],
    *,
    source: str = "loop",
    metadata: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """A child of ``thread``'s head (or its root) writing ``updates``, with ``metadata``."""
    head = saver.get(thread)
    step = head.step + 1 if head else -1
    values = {**(head.values if head else {}), **updates}
    versions = {**(head.versions if head else {}), **dict.fromkeys(updates, step + 2)}
    cp = Checkpoint(
        thread_id=thread,
        id=new_checkpoint_id(head.id if head else None),
        parent_id=head.id if head else None,
        step=step,
        values=values,
        versions=versions,
        metadata={"source": source, "step": step, **(metadata or {})},
        created_at=1_700_000_000.0 + step,
    )
    changed = frozenset(updates) if head else frozenset(values)
    saver.commit(checkpoints=[CheckpointWrite(checkpoint=cp, changed=changed)])
    got = saver.get(thread, cp.id)
    assert got is not None
    return got
