"""Checkpoints and the backends that store them."""

from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    PendingWrite,
    Task,
    ThreadInfo,
    WritesBatch,
    new_checkpoint_id,
)
from plait.checkpoint.memory import MemoryCheckpointer

__all__ = [
    "Checkpoint",
    "CheckpointWrite",
    "Checkpointer",
    "MemoryCheckpointer",
    "PendingWrite",
    "Task",
    "ThreadInfo",
    "WritesBatch",
    "new_checkpoint_id",
]
