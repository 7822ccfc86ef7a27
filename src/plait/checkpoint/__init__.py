"""Checkpoints and the backends that store them; :func:`open` opens one from an address."""

from plait.checkpoint.address import open, redact
from plait.checkpoint.base import Capabilities, Checkpointer
from plait.checkpoint.feed import ChangeFeed, ThreadChange
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.holder import Holder
from plait.checkpoint.memory import MemoryCheckpointer
from plait.checkpoint.model import (
    ANY_HEAD,
    STATUSES,
    Checkpoint,
    CheckpointWrite,
    Fence,
    Lease,
    PendingWrite,
    RestStatus,
    Status,
    Task,
    ThreadInfo,
    WritesBatch,
    new_checkpoint_id,
)
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.checkpoint.space import DeadSpace, NamespaceSpace, StoreSpace, ThreadSpace, summarize
from plait.checkpoint.sqlite import SqliteCheckpointer

__all__ = [
    "ANY_HEAD",
    "STATUSES",
    "Capabilities",
    "ChangeFeed",
    "Checkpoint",
    "CheckpointWrite",
    "Checkpointer",
    "DeadSpace",
    "Fence",
    "FileCheckpointer",
    "Holder",
    "Lease",
    "MemoryCheckpointer",
    "NamespaceSpace",
    "PostgresCheckpointer",
    "SqliteCheckpointer",
    "PendingWrite",
    "RestStatus",
    "Status",
    "StoreSpace",
    "Task",
    "ThreadChange",
    "ThreadInfo",
    "ThreadSpace",
    "WritesBatch",
    "new_checkpoint_id",
    "open",
    "redact",
    "summarize",
]
