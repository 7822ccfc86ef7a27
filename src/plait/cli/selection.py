"""Which checkpoint a command means: the head, a full id, a shortened id, or a step.

Tables show checkpoint ids shortened (:func:`short_ids`), so wherever a
command takes an id it takes any prefix that one checkpoint of the thread has, and ``--step
N`` instead. A prefix that several have is refused with the candidates listed, never guessed.
Prefixes are matched against the thread's history (the head's lineage, as ``plait history``
lists it); a full id is looked up directly, so one on a side branch works too.
"""

from collections.abc import Sequence

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint
from plait.errors import AmbiguousCheckpointError, ArgumentError, CheckpointNotFoundError

__all__ = ["find_checkpoint"]


def find_checkpoint(
    checkpointer: Checkpointer, thread: str, namespace: str, checkpoint: str | None = None, step: int | None = None
) -> Checkpoint:
    """The checkpoint ``--checkpoint`` / ``--step`` name (the head when neither is given),
    with its pending writes.

    Raises:
        ArgumentError: both given, or a negative step.
        CheckpointNotFoundError: no such thread, or nothing matches.
        AmbiguousCheckpointError: a prefix that several checkpoints start with.
    """
    if checkpoint is not None and step is not None:
        raise ArgumentError("--step", "give --checkpoint or --step, not both")
    if step is not None and step < 0:
        raise ArgumentError("--step", f"--step is a step number (0 or more), got {step}")
    if checkpoint is not None and not checkpoint:
        raise ArgumentError("--checkpoint", "--checkpoint is empty")
    if checkpoint is None and step is None:
        return _get(checkpointer, thread, namespace, None)
    if checkpoint is not None:
        exact = run_sync(checkpointer.aget(thread, checkpoint, namespace=namespace))
        if exact is not None:
            return exact
    history = run_sync(checkpointer.ahistory(thread, namespace=namespace))
    if not history:
        raise CheckpointNotFoundError(thread, None, namespace)
    if checkpoint is not None:
        found = [cp for cp in history if cp.id.startswith(checkpoint)]
        wanted = checkpoint
    else:
        found = [cp for cp in history if cp.step == step]
        wanted = f"step {step}"
    if not found:
        raise CheckpointNotFoundError(thread, wanted, namespace)
    if len(found) > 1:
        raise AmbiguousCheckpointError(thread, wanted, [(cp.id, cp.step) for cp in found])
    return _get(checkpointer, thread, namespace, found[0].id)


def _get(checkpointer: Checkpointer, thread: str, namespace: str, checkpoint_id: str | None) -> Checkpoint:
    cp = run_sync(checkpointer.aget(thread, checkpoint_id, namespace=namespace))
    if cp is None:
        raise CheckpointNotFoundError(thread, checkpoint_id, namespace)
    return cp


SHORT_ID = 12
"""Hex digits shown of a checkpoint id in tables: 48 of the 52 bits of its microsecond clock,
so two checkpoints of one thread share a shortened id only when written within 16 µs."""


def short_ids(ids: Sequence[str]) -> int:
    """How many leading characters of each id a table shows: at least :data:`SHORT_ID`, more
    where two of ``ids`` would otherwise look alike (any unique prefix is accepted back)."""
    n = SHORT_ID
    longest = max((len(i) for i in ids), default=n)
    while n < longest and len({i[:n] for i in ids}) < len(set(ids)):
        n += 1
    return n
