"""MemoryCheckpointer: checkpoints in process memory, for tests and short-lived runs.

Values are frozen JSON, so a stored checkpoint shares them with the run that wrote it at no
cost and nobody can change them afterwards; nothing is encoded, nothing survives the process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from plait.checkpoint import lease as rules
from plait.checkpoint._common import check_filter, check_prune, keep_set, page_threads, walk_lineage
from plait.checkpoint._validate import check_commit, check_id, check_thread
from plait.checkpoint.base import Capabilities, Checkpointer
from plait.checkpoint.feed import Broadcast, ChangeFeed
from plait.checkpoint.holder import Holder
from plait.checkpoint.model import (
    Checkpoint,
    CheckpointWrite,
    Fence,
    Lease,
    PendingWrite,
    RestStatus,
    Status,
    ThreadInfo,
    WritesBatch,
    check_listing,
    fence_targets,
)
from plait.checkpoint.retention import Retention
from plait.errors import ConcurrentUpdateError
from plait.store import MemorySearch, MemoryWrite, NamespaceListing, StoredItem
from plait.store.memory import MemoryItems

if TYPE_CHECKING:
    from plait.checkpoint.cache import NodeCache

__all__ = ["MemoryCheckpointer"]

_Thread = tuple[str, str]  # (namespace, thread_id)


class MemoryCheckpointer(Checkpointer):
    """Keeps every thread in dictionaries; fast, and gone when the process exits.

    Args:
        lease_ttl: seconds a run's lease lasts unless renewed.
        clock: the lease clock (unix seconds); tests pass one they advance by hand.
        retention: the policy :meth:`asweep` applies (see :class:`~plait.checkpoint.retention.Retention`).
    """

    capabilities = Capabilities(kind="memory", any_loop=True, change_feed=True, memory=True)

    def __init__(
        self,
        *,
        lease_ttl: float = 30.0,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
    ) -> None:
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.set_retention(retention)
        self._checkpoints: dict[_Thread, dict[str, Checkpoint]] = {}
        self._writes: dict[tuple[str, str, str], dict[tuple[str, str, str], PendingWrite]] = {}
        self._heads: dict[_Thread, str] = {}
        """Each thread's newest checkpoint id, kept on commit so that reading or checking a
        head does not scan the thread (see :meth:`_head`)."""
        self._rows: dict[_Thread, rules.LeaseRow] = {}
        """Each thread's lease and status at rest (see :mod:`plait.checkpoint.lease`)."""
        self._lease_lock = threading.Lock()  # leases are also renewed from a plain thread
        self._memory = MemoryItems()
        """The memory store's items; a commit changes them under its lease lock too."""
        self._memory.lock = self._lease_lock
        self._changes = Broadcast()

    def open_cache(self) -> NodeCache:
        """A node cache in this process's memory, expiring by this store's clock."""
        from plait.checkpoint.cache import MemoryCache

        return MemoryCache(clock=self.store_time)

    def achanges(
        self, *, namespace: str | None = None, thread_id: str | None = None, interval: float | None = None
    ) -> ChangeFeed:
        """An in-process notice of every write (``interval`` is unused: nothing polls)."""
        return self._changes.feed(namespace=namespace, thread_id=thread_id)

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        # Nothing here awaits, so the whole commit is atomic with respect to other tasks; the
        # lease lock makes it atomic with lease changes from other threads (the renewer) and
        # with commits from other event loops, so a fence's check and the write are one step.
        check_commit(checkpoints, writes)
        with self._lease_lock:
            now = self.clock()
            rows: dict[_Thread, rules.LeaseRow] = {}
            if fence is not None:
                rows = self._check_fence(checkpoints, writes, fence, now)
            self._store(checkpoints, writes)
            if memory:
                self._memory.apply_locked(memory)
            self._rows.update(rows)
            if fence is None or fence.token is None:
                self._settle(checkpoints, writes, now)
            elif fence.release:
                for key in fence_targets(checkpoints, writes, fence)[0]:
                    released = rules.release(self._rows.get(key), fence.token, status=fence.status, now=now)
                    if released is not None:
                        self._rows[key] = released
        self._changes.committed(checkpoints, writes)

    # -- the memory store: items in dictionaries, changed by commits under the same lock ----------

    async def aget_memory(self, namespace: tuple[str, ...], key: str, *, now: int, refresh: bool) -> StoredItem | None:
        return await self._memory.aget_memory(namespace, key, now=now, refresh=refresh)

    async def asearch_memory(self, search: MemorySearch) -> list[StoredItem]:
        return await self._memory.asearch_memory(search)

    async def alist_memory_namespaces(self, listing: NamespaceListing) -> list[tuple[str, ...]]:
        return await self._memory.alist_memory_namespaces(listing)

    async def asweep_memory(self, *, now: int) -> int:
        return await self._memory.asweep_memory(now=now)

    def _check_fence(
        self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch], fence: Fence, now: float
    ) -> dict[_Thread, rules.LeaseRow]:
        """Raise when ``fence`` refuses the commit; the caller holds the lease lock. Returns
        the rows the commit changes (leases it revokes)."""
        threads, head = fence_targets(checkpoints, writes, fence)
        changed: dict[_Thread, rules.LeaseRow] = {}
        for key in threads:
            row = rules.check_fence(self._rows.get(key), fence, thread_id=key[1], namespace=key[0], now=now)
            if row is not None:
                changed[key] = row
        if head is not None:
            found = self._head((head.namespace, head.thread_id))
            if not head.holds(found):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found)
            if head.needs_quiet(found) and self._writes.get((head.namespace, head.thread_id, str(found))):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found, pending_writes=True)
        rules.check_quiet_parent(
            checkpoints,
            fence,
            lambda ns, tid, cid: cid in self._checkpoints.get((ns, tid), {}),
            lambda *where: bool(self._writes.get(where)),
        )
        return changed

    def _settle(self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch], now: float) -> None:
        """Record how a one-off write leaves each thread it touches (a run's steps do not)."""
        for key, status in rules.settled(checkpoints, writes).items():
            row = self._rows.get(key) or rules.LeaseRow()
            self._rows[key] = replace(row, status=status, updated_at=now)

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

    async def atree(self, thread_id: str, *, namespace: str = "") -> dict[str, str | None]:
        check_thread(thread_id, namespace)
        thread = self._checkpoints.get((namespace, thread_id)) or {}
        return {cid: thread[cid].parent_id for cid in sorted(thread)}

    async def alist_threads(
        self,
        *,
        namespace: str | None = None,
        status: Status | None = None,
        limit: int | None = None,
        before: str | None = None,
        prefix: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[ThreadInfo]:
        check_listing(status, limit, prefix, metadata)
        if namespace is not None:
            check_id(namespace, "namespace")
        with self._lease_lock:
            now = self.clock()
            infos = [
                self._info(key, now)
                for key, thread in self._checkpoints.items()
                if thread and (namespace is None or key[0] == namespace)
            ]
            heads = (
                {(i.namespace, i.thread_id): self._checkpoints[(i.namespace, i.thread_id)][i.head_id] for i in infos}
                if metadata
                else {}
            )
        return page_threads(
            infos,
            status=status,
            limit=limit,
            before=before,
            prefix=prefix,
            metadata=metadata,
            metadata_of=lambda info: heads[(info.namespace, info.thread_id)].metadata,
        )

    async def aget_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None:
        check_thread(thread_id, namespace)
        key = (namespace, thread_id)
        with self._lease_lock:
            return self._info(key, self.clock()) if self._checkpoints.get(key) else None

    def _info(self, key: _Thread, now: float) -> ThreadInfo:
        thread = self._checkpoints[key]
        head = thread[self._head(key) or max(thread)]
        row = self._rows.get(key)
        fallback = rules.rest_status(head.next_tasks, self._writes.get((*key, head.id), {}).values())
        parent = self._rows.get(("", key[1])) if key[0] else None  # a subgraph's: busy while its parent is
        info = ThreadInfo(
            thread_id=key[1],
            namespace=key[0],
            status=rules.shown_status(row, now, fallback),
            head_id=head.id,
            step=head.step,
            created_at=head.created_at,
            updated_at=row.updated_at if row is not None and row.updated_at else head.created_at,
            source=str(head.metadata.get("source", "")),
            checkpoints=len(thread),
            lease=row.lease(key[1], key[0]) if row is not None else None,
        )
        return info if parent is None else rules.under_parent(info, rules.shown_status(parent, now))

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        with self._lease_lock:
            row = self._rows.get((namespace, thread_id))
            if row is not None:  # kept as a tombstone: generations never restart
                self._rows[(namespace, thread_id)] = replace(row, gen=row.gen + 1, owner="delete", held=False)
        self._checkpoints.pop((namespace, thread_id), None)
        self._heads.pop((namespace, thread_id), None)
        for key in [k for k in self._writes if k[0] == namespace and k[1] == thread_id]:
            del self._writes[key]
        self._changes.changed(namespace, thread_id)

    async def aprune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int:
        check_thread(thread_id, namespace)
        check_prune(keep_last, newer_than)
        thread = self._checkpoints.get((namespace, thread_id))
        if not thread:
            return 0
        keep = keep_set(
            {cid: cp.parent_id for cid, cp in thread.items()},
            keep_last,
            newer_than,
            thread_id=thread_id,
            namespace=namespace,
            branches=branches,
        )
        dropped = [cid for cid in thread if cid not in keep]
        self._heads.pop((namespace, thread_id), None)  # recomputed on the next read
        for cid in dropped:
            del thread[cid]
            self._writes.pop((namespace, thread_id, cid), None)
        # A kept checkpoint whose parent was dropped becomes a root of what remains.
        for cid, cp in list(thread.items()):
            if cp.parent_id is not None and cp.parent_id not in thread:
                thread[cid] = replace(cp, parent_id=None)
        if newer_than is not None and dropped:
            # the thread was rewritten under any run holding its lease: that run must stop
            head = thread[max(thread)]
            status = rules.rest_status(head.next_tasks, self._writes.get((namespace, thread_id, head.id), {}).values())
            with self._lease_lock:
                row = self._rows.get((namespace, thread_id))
                if row is not None:
                    self._rows[(namespace, thread_id)] = rules.revoked(
                        row, owner="prune", status=status, now=self.clock()
                    )
        self._changes.changed(namespace, thread_id)
        return len(dropped)

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        return self.take_lease(thread_id, owner, namespace=namespace, ttl=ttl)

    def take_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        """:meth:`atake_lease` without a loop: safe from any thread of this process."""
        check_thread(thread_id, namespace)
        key = (namespace, thread_id)
        with self._lease_lock:
            row = rules.take(
                self._rows.get(key),
                thread_id=thread_id,
                namespace=namespace,
                owner=owner,
                ttl=self.lease_ttl if ttl is None else ttl,
                now=self.clock(),
                holder=Holder.current(),
            )
            self._rows[key] = row
            lease = row.lease(thread_id, namespace)
        assert lease is not None
        self._changes.changed(namespace, thread_id)
        return lease

    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        return self.renew_lease(lease, ttl=ttl)

    def renew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        """:meth:`arenew_lease` without a loop: safe from any thread of this process."""
        check_thread(lease.thread_id, lease.namespace)
        key = (lease.namespace, lease.thread_id)
        with self._lease_lock:
            now = self.clock()
            row = rules.renew(self._rows.get(key), lease, ttl=self.lease_ttl if ttl is None else ttl, now=now)
            self._rows[key] = row
        return replace(lease, expires_at=row.expires_at)

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        check_thread(lease.thread_id, lease.namespace)
        key = (lease.namespace, lease.thread_id)
        with self._lease_lock:
            row = rules.release(self._rows.get(key), lease.token, status=status, now=self.clock())
            if row is not None:
                self._rows[key] = row
        self._changes.changed(lease.namespace, lease.thread_id)
