"""Checkpoints and the backends that store them; :func:`open` opens one from an address."""

from plait.checkpoint.address import open, redact
from plait.checkpoint.base import (
    ANY_HEAD,
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    Fence,
    PendingWrite,
    Task,
    ThreadInfo,
    WritesBatch,
    new_checkpoint_id,
)
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.memory import MemoryCheckpointer
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.checkpoint.sqlite import SqliteCheckpointer

__all__ = [
    "ANY_HEAD",
    "Checkpoint",
    "CheckpointWrite",
    "Checkpointer",
    "Fence",
    "FileCheckpointer",
    "MemoryCheckpointer",
    "PostgresCheckpointer",
    "SqliteCheckpointer",
    "PendingWrite",
    "Task",
    "ThreadInfo",
    "WritesBatch",
    "new_checkpoint_id",
    "open",
    "redact",
]
