"""Rolling a thread back to the checkpoint a stopped run started from (``multitask="rollback"``).

One atomic prune (``newer_than``): every checkpoint written after that checkpoint goes, in the
store's own transaction, so a crash leaves either the thread as it was or rolled back, never
without its history. It runs inside the new run's job, which holds the thread's Procrastinate
lock: no other run of the thread writes meanwhile. Checkpoints written before the stopped run
started (the thread's older history and its time-travel branches) stay.
"""

from __future__ import annotations

from plait.checkpoint.base import Checkpointer

__all__ = ["rewind"]


async def rewind(checkpointer: Checkpointer, thread_id: str, namespace: str, to: str | None) -> int:
    """Leave ``thread_id`` as it was at checkpoint ``to`` (None: the stopped run started the
    thread, so none of it stays); returns how many checkpoints were dropped."""
    head = await checkpointer.aget(thread_id, namespace=namespace)
    if head is None or head.id == to:
        return 0
    if to is None or await checkpointer.aget(thread_id, to, namespace=namespace) is None:
        dropped = len(await checkpointer.ahistory(thread_id, namespace=namespace))
        await checkpointer.adelete_thread(thread_id, namespace=namespace)
        return dropped
    return await checkpointer.aprune(thread_id, newer_than=to, namespace=namespace)
