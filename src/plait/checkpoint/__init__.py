"""Checkpoints and the backends that store them; :func:`open` opens one from an address.

The names load on first use (PEP 562), so a module that needs one backend, or only the
records, does not load PostgreSQL's, the file store's and SQLite's; see plait/__init__.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait._lazy import lazy_names

if TYPE_CHECKING:
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
    from plait.checkpoint.retention import Retention, SweepReport
    from plait.checkpoint.space import DeadSpace, NamespaceSpace, StoreSpace, ThreadSpace, summarize
    from plait.checkpoint.sqlite import SqliteCheckpointer

_EXPORTS: dict[str, tuple[str, ...]] = {
    "plait.checkpoint.space": (
        "DeadSpace",
        "NamespaceSpace",
        "StoreSpace",
        "ThreadSpace",
        "summarize",
    ),
    "plait.checkpoint.address": (
        "open",
        "redact",
    ),
    "plait.checkpoint.base": (
        "Capabilities",
        "Checkpointer",
    ),
    "plait.checkpoint.feed": (
        "ChangeFeed",
        "ThreadChange",
    ),
    "plait.checkpoint.file": ("FileCheckpointer",),
    "plait.checkpoint.holder": ("Holder",),
    "plait.checkpoint.memory": ("MemoryCheckpointer",),
    "plait.checkpoint.model": (
        "ANY_HEAD",
        "STATUSES",
        "Checkpoint",
        "CheckpointWrite",
        "Fence",
        "Lease",
        "PendingWrite",
        "RestStatus",
        "Status",
        "Task",
        "ThreadInfo",
        "WritesBatch",
        "new_checkpoint_id",
    ),
    "plait.checkpoint.postgres": ("PostgresCheckpointer",),
    "plait.checkpoint.retention": (
        "Retention",
        "SweepReport",
    ),
    "plait.checkpoint.sqlite": ("SqliteCheckpointer",),
}

__all__ = [
    "ANY_HEAD",
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
    "PendingWrite",
    "PostgresCheckpointer",
    "RestStatus",
    "Retention",
    "STATUSES",
    "SqliteCheckpointer",
    "Status",
    "StoreSpace",
    "SweepReport",
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

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS, __all__)
