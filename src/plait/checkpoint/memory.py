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
from plait.checkpoint._validate import check_commit, check_id, check_thread
from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    Fence,
    PendingWrite,
    ThreadInfo,
    WritesBatch,
    fence_targets,
)
from plait.errors import ConcurrentUpdateError, ThreadBusyError

__all__ = ["MemoryCheckpointer"]

_Thread = tuple[str, str]  # (namespace, thread_id)


class MemoryCheckpointer(Checkpointer):
    """Keeps every thread in dictionaries; fast, and gone when the process exits."""

    releases_with_commit = True

    def __init__(self) -> None:
        self._checkpoints: dict[_Thread, dict[str, Checkpoint]] = {}
        self._writes: dict[tuple[str, str, str], dict[tuple[str, str, str], PendingWrite]] = {}
        self._heads: dict[_Thread, str] = {}
        """Each thread's newest checkpoint id, kept on commit so that reading or checking a
        head does not scan the thread (see :meth:`_head`)."""
        self._leases: dict[_Thread, tuple[str, float]] = {}
        self._lease_lock = threading.Lock()  # leases are also renewed from a plain thread

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
    ) -> None:
        # Nothing here awaits, so the whole commit is atomic with respect to other tasks; the
        # lease lock makes it atomic with lease changes from other threads (the renewer) and
        # with commits from other event loops, so a fence's check and the write are one step.
        check_commit(checkpoints, writes)
        with self._lease_lock:
            if fence is not None:
                self._check_fence(checkpoints, writes, fence)
            self._store(checkpoints, writes)
            if fence is not None and fence.release:
                for key in fence_targets(checkpoints, writes, fence)[0]:
                    self._drop_lease(key, fence.owner)

    def _check_fence(self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch], fence: Fence) -> None:
        """Raise when ``fence`` refuses the commit; the caller holds the lease lock."""
        threads, head = fence_targets(checkpoints, writes, fence)
        now = time.monotonic()
        for key in threads:
            held = self._leases.get(key)
            if held is not None and held[0] != fence.owner and held[1] > now:
                raise ThreadBusyError(key[1], held[0], held[1] - now)
        if head is not None:
            found = self._head((head.namespace, head.thread_id))
            if not head.holds(found):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found)
            if head.needs_quiet(found) and self._writes.get((head.namespace, head.thread_id, str(found))):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found, pending_writes=True)

    def _store(self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch]) -> None:
        for batch in writes:
            slot = self._writes.setdefault((batch.namespace, batch.thread_id, batch.checkpoint_id), {})
            for w in batch.writes:
                slot[(w.task_id, w.kind, w.key)] = w
        for cw in checkpoints:
            cp = cw.checkpoint
            key = (cp.namespace, cp.thread_id)
            stored = replace(cp, pending_writes=()) if cp.pending_writes else cp
            self._checkpoints.setdefault(key, {})[cp.id] = stored
            known = self._heads.get(key)
            if known is None or cp.id > known:
                self._heads[key] = cp.id
            if cw.folds_parent_writes and cp.parent_id is not None:
                self._writes.pop((cp.namespace, cp.thread_id, cp.parent_id), None)

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        check_thread(thread_id, namespace, checkpoint_id)
        thread = self._checkpoints.get((namespace, thread_id))
        if not thread:
            return None
        if checkpoint_id is None:
            checkpoint_id = self._head((namespace, thread_id))
        cp = thread.get(checkpoint_id) if checkpoint_id is not None else None
        if cp is None:
            return None
        pending = self._writes.get((namespace, thread_id, cp.id))
        return replace(cp, pending_writes=tuple(pending.values())) if pending else cp

    def _head(self, key: _Thread) -> str | None:
        """The thread's newest checkpoint id (None: no checkpoint), from :attr:`_heads` when
        it is current, else (a prune or delete since, or a subclass that edits the thread
        directly) by scanning the thread."""
        thread = self._checkpoints.get(key)
        if not thread:
            return None
        head = self._heads.get(key)
        if head is None or head not in thread:
            head = self._heads[key] = max(thread)
        return head

    async def ahistory(
        self,
        thread_id: str,
        *,
        namespace: str = "",
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Checkpoint]:
        check_thread(thread_id, namespace, before, what="before")
        check_filter(filter)
        thread = self._checkpoints.get((namespace, thread_id)) or {}
        return walk_lineage(
            thread_id,
            thread,
            before=before,
            limit=limit,
            filter=filter,
            parent_of=lambda cp: cp.parent_id,
            metadata_of=lambda cp: cp.metadata,
        )

    async def alist_threads(self, *, namespace: str | None = None) -> list[ThreadInfo]:
        if namespace is not None:
            check_id(namespace, "namespace")
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

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        self._checkpoints.pop((namespace, thread_id), None)
        self._heads.pop((namespace, thread_id), None)
        for key in [k for k in self._writes if k[0] == namespace and k[1] == thread_id]:
            del self._writes[key]

    async def aprune(self, thread_id: str, *, keep_last: int, namespace: str = "") -> int:
        check_thread(thread_id, namespace)
        thread = self._checkpoints.get((namespace, thread_id))
        if not thread:
            return 0
        keep = keep_set({cid: cp.parent_id for cid, cp in thread.items()}, keep_last)
        dropped = [cid for cid in thread if cid not in keep]
        self._heads.pop((namespace, thread_id), None)  # recomputed on the next read
        for cid in dropped:
            del thread[cid]
            self._writes.pop((namespace, thread_id, cid), None)
        # A kept checkpoint whose parent was dropped becomes a root of what remains.
        for cid, cp in list(thread.items()):
            if cp.parent_id is not None and cp.parent_id not in thread:
                thread[cid] = replace(cp, parent_id=None)
        return len(dropped)

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        self.take_lease(thread_id, owner, namespace=namespace, ttl=ttl)

    def take_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        """:meth:`acquire_lease` without a loop: safe from any thread of this process."""
        check_thread(thread_id, namespace)
        key = (namespace, thread_id)
        with self._lease_lock:
            now = time.monotonic()
            held = self._leases.get(key)
            if held is not None and held[0] != owner and held[1] > now:
                raise ThreadBusyError(thread_id, held[0], held[1] - now)
            self._leases[key] = (owner, now + (self.lease_ttl if ttl is None else ttl))

    async def arelease_lease(self, thread_id: str, owner: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        with self._lease_lock:
            self._drop_lease((namespace, thread_id), owner)

    def _drop_lease(self, key: _Thread, owner: str) -> None:
        """Remove the lease on ``key`` if ``owner`` holds it; the caller holds the lease lock."""
        held = self._leases.get(key)
        if held is not None and held[0] == owner:
            del self._leases[key]
