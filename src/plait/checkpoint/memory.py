"""MemoryCheckpointer: checkpoints in process memory, for tests and short-lived runs.

Values are frozen JSON, so a stored checkpoint shares them with the run that wrote it at no
cost and nobody can change them afterwards; nothing is encoded, nothing survives the process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from plait.checkpoint._common import check_filter, keep_set, walk_lineage
from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    PendingWrite,
    ThreadInfo,
    WritesBatch,
)
from plait.errors import ThreadBusyError

__all__ = ["MemoryCheckpointer"]

_Thread = tuple[str, str]  # (namespace, thread_id)


class MemoryCheckpointer(Checkpointer):
    """Keeps every thread in dictionaries; fast, and gone when the process exits."""

    def __init__(self) -> None:
        self._checkpoints: dict[_Thread, dict[str, Checkpoint]] = {}
        self._writes: dict[tuple[str, str, str], dict[tuple[str, str, str], PendingWrite]] = {}
        self._leases: dict[_Thread, tuple[str, float]] = {}
        self._lease_lock = threading.Lock()  # leases are also renewed from a plain thread

    async def commit(self, *, checkpoints: Sequence[CheckpointWrite] = (), writes: Sequence[WritesBatch] = ()) -> None:
        # Nothing here awaits, so the whole commit is atomic with respect to other tasks.
        for batch in writes:
            slot = self._writes.setdefault((batch.namespace, batch.thread_id, batch.checkpoint_id), {})
            for w in batch.writes:
                slot[(w.task_id, w.kind, w.key)] = w
        for cw in checkpoints:
            cp = cw.checkpoint
            key = (cp.namespace, cp.thread_id)
            stored = replace(cp, pending_writes=()) if cp.pending_writes else cp
            self._checkpoints.setdefault(key, {})[cp.id] = stored
            if cw.folds_parent_writes and cp.parent_id is not None:
                self._writes.pop((cp.namespace, cp.thread_id, cp.parent_id), None)

    async def get(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        thread = self._checkpoints.get((namespace, thread_id))
        if not thread:
            return None
        if checkpoint_id is None:
            checkpoint_id = max(thread)
        cp = thread.get(checkpoint_id)
        if cp is None:
            return None
        pending = self._writes.get((namespace, thread_id, checkpoint_id))
        return replace(cp, pending_writes=tuple(pending.values())) if pending else cp

    async def history(
        self,
        thread_id: str,
        *,
        namespace: str = "",
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Checkpoint]:
        check_filter(filter)
        thread = self._checkpoints.get((namespace, thread_id)) or {}
        return walk_lineage(
            thread,
            before=before,
            limit=limit,
            filter=filter,
            parent_of=lambda cp: cp.parent_id,
            metadata_of=lambda cp: cp.metadata,
        )

    async def list_threads(self, *, namespace: str | None = None) -> list[ThreadInfo]:
        infos = []
        for (ns, tid), thread in self._checkpoints.items():
            if (namespace is not None and ns != namespace) or not thread:
                continue
            head = thread[max(thread)]
            infos.append(
                ThreadInfo(
                    thread_id=tid,
                    namespace=ns,
                    head_id=head.id,
                    step=head.step,
                    created_at=head.created_at,
                    source=str(head.metadata.get("source", "")),
                    checkpoints=len(thread),
                )
            )
        infos.sort(key=lambda t: t.head_id, reverse=True)
        return infos

    async def delete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        self._checkpoints.pop((namespace, thread_id), None)
        for key in [k for k in self._writes if k[0] == namespace and k[1] == thread_id]:
            del self._writes[key]

    async def prune(self, thread_id: str, *, keep_last: int, namespace: str = "") -> int:
        thread = self._checkpoints.get((namespace, thread_id))
        if not thread:
            return 0
        keep = keep_set({cid: cp.parent_id for cid, cp in thread.items()}, keep_last)
        dropped = [cid for cid in thread if cid not in keep]
        for cid in dropped:
            del thread[cid]
            self._writes.pop((namespace, thread_id, cid), None)
        # A kept checkpoint whose parent was dropped becomes a root of what remains.
        for cid, cp in list(thread.items()):
            if cp.parent_id is not None and cp.parent_id not in thread:
                thread[cid] = replace(cp, parent_id=None)
        return len(dropped)

    async def acquire_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        self.take_lease(thread_id, owner, namespace=namespace, ttl=ttl)

    def take_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        """:meth:`acquire_lease` without a loop: safe from any thread of this process."""
        key = (namespace, thread_id)
        with self._lease_lock:
            now = time.monotonic()
            held = self._leases.get(key)
            if held is not None and held[0] != owner and held[1] > now:
                raise ThreadBusyError(thread_id, held[0], held[1] - now)
            self._leases[key] = (owner, now + (self.lease_ttl if ttl is None else ttl))

    async def release_lease(self, thread_id: str, owner: str, *, namespace: str = "") -> None:
        key = (namespace, thread_id)
        with self._lease_lock:
            held = self._leases.get(key)
            if held is not None and held[0] == owner:
                del self._leases[key]
