"""The Checkpointer protocol implemented once for every SQL dialect.

A dialect package (``sqlite/``, ``postgres/``) says only how it reaches its database: how a
read, a write and a commit get a cursor and a transaction (a writer thread and a snapshot
connection for SQLite, a pool and server-side functions for PostgreSQL), and which clock
leases use. Everything a method means (checks, statements, decoding, listings, pruning) is
here and in :class:`~plait.checkpoint.sql._core.SqlCore`, so the two cannot drift apart and a new
dialect is its connections plus a :class:`~plait.checkpoint.sql._base.Dialect`.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, TypeVar

from plait._gc_pause import gc_paused
from plait.checkpoint._common import check_prune
from plait.checkpoint._sweep import BATCH, Applied, GroupPlan
from plait.checkpoint._validate import check_id, check_thread
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import (
    Checkpoint,
    CheckpointWrite,
    Fence,
    Lease,
    RestStatus,
    Status,
    ThreadInfo,
    WritesBatch,
)
from plait.checkpoint.space import DeadSpace, StoreSpace, ThreadSpace
from plait.checkpoint.sql._base import CommitRequest, Cursor
from plait.checkpoint.sql._core import SqlCore
from plait.checkpoint.sql._sweep import SqlSweep
from plait.store import MemorySearch, MemoryWrite, NamespaceListing, StoredItem

if TYPE_CHECKING:
    from plait.checkpoint.cache import NodeCache

__all__ = ["SqlCheckpointer"]

T = TypeVar("T")


class SqlCheckpointer(Checkpointer):
    """The protocol over a :class:`SqlCore` and four hooks a dialect implements."""

    _core: SqlCore

    # -- the hooks ---------------------------------------------------------------------------

    @abstractmethod
    async def _reading(self, fn: Callable[[Cursor], T]) -> T:
        """Run ``fn`` in a read-only transaction (one consistent snapshot)."""

    @abstractmethod
    async def _writing(self, fn: Callable[[Cursor], T]) -> T:
        """Run ``fn`` in a write transaction."""

    @abstractmethod
    async def _committing(self, request: CommitRequest) -> None:
        """Store a checked commit request, atomically."""

    @abstractmethod
    def _now(self) -> float | None:
        """The lease clock's time, or None where the database's own clock is read instead."""

    async def _reading_one(self, fn: Callable[[Cursor], T]) -> T:
        """Run ``fn``, which makes one SELECT: a statement is its own snapshot, so a dialect
        may skip the transaction around it (SQLite: a BEGIN and a COMMIT fewer)."""
        return await self._reading(fn)

    async def _bulk_writing(self, fn: Callable[[Cursor], T]) -> T:
        """Run ``fn``, which makes many statements (a sweep's batch), in a write transaction:
        a dialect may send them without waiting for each result."""
        return await self._writing(fn)

    async def _leasing(self, fn: Callable[[Cursor], T]) -> T:
        """Run a lease statement (take, renew, give back): a dialect may route them apart
        from commits."""
        return await self._writing(fn)

    def _dead_space(self, cur: Cursor) -> DeadSpace | None:
        """The space deleted and pruned rows left behind, read in :meth:`aspace`'s snapshot
        (each engine measures it its own way); None: not known."""
        return None

    async def aspace(self) -> StoreSpace:
        """Checkpoints and payload bytes per stored ``(namespace, thread_id)`` (subgraph
        namespaces too: they have checkpoints but no thread row), by one grouped scan of each
        table, and the dialect's dead space."""

        def read(cur: Cursor) -> StoreSpace:
            rows = cur.execute(self._core.statement("sizes")).fetchall()
            threads = [
                ThreadSpace(namespace=ns, thread_id=tid, checkpoints=int(n), bytes=int(b or 0))
                for ns, tid, n, b in rows
                if n
            ]
            return StoreSpace(threads=threads, dead=self._dead_space(cur))

        return await self._reading(read)

    # -- the protocol ------------------------------------------------------------------------

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        if memory:
            self.check_memory()
        if not checkpoints and not writes and not memory:
            return
        request = CommitRequest(checkpoints=checkpoints, writes=writes, fence=fence, memory=tuple(memory))
        self._core.commit.check_request(request)
        await self._committing(request)

    # -- the memory store: items in this database, written by commits (sql._memory) ------------

    async def aget_memory(self, namespace: tuple[str, ...], key: str, *, now: int, refresh: bool) -> StoredItem | None:
        memory = self._core.memory
        found = await self._reading_one(lambda cur: memory.get(cur, namespace, key, now))
        if found is None:
            return None
        if refresh and found.ttl is not None:
            await self._writing(lambda cur: memory.refresh(cur, [found], now))
        return found.item

    async def asearch_memory(self, search: MemorySearch) -> list[StoredItem]:
        memory = self._core.memory
        found = await self._reading(lambda cur: memory.search(cur, search))
        if search.refresh and any(f.ttl is not None for f in found):
            await self._writing(lambda cur: memory.refresh(cur, found, search.now))
        return [f.item for f in found]

    async def alist_memory_namespaces(self, listing: NamespaceListing) -> list[tuple[str, ...]]:
        return await self._reading(lambda cur: self._core.memory.namespaces(cur, listing))

    async def asweep_memory(self, *, now: int) -> int:
        return await self._writing(lambda cur: self._core.memory.sweep(cur, now))

    async def _aread_policy(self) -> Any:
        return await self._reading(self._core.policy.read)

    async def _awrite_policy(self, data: dict[str, Any] | None) -> None:
        await self._writing(lambda cur: self._core.policy.write(cur, data))

    def open_cache(self) -> NodeCache:
        """The node cache in this database: a table of its own (see :mod:`plait.checkpoint.cache._sql`)."""
        from plait.checkpoint.cache._sql import SqlCache

        return SqlCache(
            self._core.dialect, self._core.store, reading=self._reading_one, writing=self._writing, now=self._now
        )

    def known_head(self, thread_id: str, *, namespace: str = "") -> Checkpoint | None:
        return self._core.cache.known((namespace, thread_id))

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        check_thread(thread_id, namespace, checkpoint_id)
        return await self._reading(lambda cur: self._core.read.get(cur, namespace, thread_id, checkpoint_id))

    async def aget_with_status(
        self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> tuple[Checkpoint | None, Status | None]:
        check_thread(thread_id, namespace, checkpoint_id)

        def read(cur: Cursor) -> tuple[Checkpoint | None, Status | None]:
            if namespace:  # a subgraph's status: its parent's lease shows through (SqlThreads.status)
                cp = self._core.read.get(cur, namespace, thread_id, checkpoint_id)
                return cp, None if cp is None else self._core.threads.status(cur, (namespace, thread_id), self._now())
            return self._core.get_with_status(cur, thread_id, checkpoint_id, self._now())

        return await self._reading(read)

    async def aget_for_write(
        self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> Checkpoint | None:
        check_thread(thread_id, namespace, checkpoint_id)
        cp = await self._reading(lambda cur: self._core.read.get(cur, namespace, thread_id, checkpoint_id, resume=True))
        if cp is not None and checkpoint_id is not None:
            self._core.cache.remember_past((namespace, thread_id), cp)
        return cp

    def known_checkpoint(self, thread_id: str, checkpoint_id: str, *, namespace: str = "") -> Checkpoint | None:
        # The commit built on it is fenced by Fence.expect_parent_no_writes: SELECTs in the
        # write transaction (SQLite), or fence() and put_checkpoint() themselves (PostgreSQL,
        # schema 13), so the update is one call there, with no read before it.
        past = self._core.cache.past((namespace, thread_id), checkpoint_id)
        return None if past is None else past.record

    async def aget_with_head(
        self, thread_id: str, checkpoint_id: str, *, namespace: str = ""
    ) -> tuple[Checkpoint | None, str | None]:
        check_thread(thread_id, namespace, checkpoint_id)

        def read(cur: Cursor) -> tuple[Checkpoint | None, str | None]:
            cp = self._core.read.get(cur, namespace, thread_id, checkpoint_id)
            row = cur.execute(self._core.statement("head_id"), (namespace, thread_id)).fetchone()
            return cp, None if row is None else row[0]

        return await self._reading(read)

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

        def read(cur: Cursor) -> list[Checkpoint]:
            with gc_paused():  # a history builds containers by the thousand (see plait._gc_pause)
                return self._core.read.history(cur, namespace, thread_id, limit=limit, before=before, filter=filter)

        return await self._reading(read)

    async def atree(self, thread_id: str, *, namespace: str = "") -> dict[str, str | None]:
        check_thread(thread_id, namespace)
        return await self._reading(lambda cur: self._core.read.tree(cur, namespace, thread_id))

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
        if namespace is not None:
            check_id(namespace, "namespace")
        return await self._reading(
            lambda cur: self._core.threads.page(
                cur,
                namespace=namespace,
                status=status,
                limit=limit,
                before=before,
                prefix=prefix,
                metadata=metadata,
                now=self._now(),
            )
        )

    async def aget_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None:
        check_thread(thread_id, namespace)
        return await self._reading(lambda cur: self._core.threads.one(cur, (namespace, thread_id), self._now()))

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        await self._writing(lambda cur: self._core.delete_thread(cur, namespace, thread_id, self._now()))

    async def aprune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int:
        check_prune(keep_last, newer_than)
        check_thread(thread_id, namespace)
        return await self._writing(
            lambda cur: self._core.prune(cur, namespace, thread_id, keep_last, newer_than, self._now(), branches)
        )

    @cached_property
    def _sql_sweep(self) -> SqlSweep:
        return SqlSweep(self._core)

    async def _alist_for_sweep(self, *, dry_run: bool) -> tuple[list[ThreadInfo], bool]:
        """The threads a sweep judges: without their counts where the sweep changes things
        and the dialect does not rebuild (which needs the plans' ``share`` of the store)."""
        batch = self._core.dialect.batch
        if dry_run or batch.rebuild:
            return await self.alist_threads(), True
        now = self._now()

        def listing(cur: Cursor) -> list[ThreadInfo]:
            if batch.listing_setup:
                cur.execute(batch.listing_setup)
            return self._core.threads.page(
                cur, namespace=None, status=None, limit=None, before=None, now=now, counted=False
            )

        # in a transaction of its own where a setting must hold for it alone
        return await (self._writing(listing) if batch.listing_setup else self._reading(listing)), False

    async def _acount_checkpoints(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The checkpoints of each thread of ``keys``, by one statement per batch of keys."""
        return await self._reading(lambda cur: self._sql_sweep.counts(cur, keys))

    async def _aheads_metadata(self, heads: Sequence[ThreadInfo]) -> list[Any]:
        """The metadata of each listed thread's head, by one statement per batch of heads."""
        rows = [(info.namespace, info.thread_id, info.head_id) for info in heads]
        return await self._reading(lambda cur: self._sql_sweep.heads_metadata(cur, rows))

    async def _aapply_sweep(self, plans: Sequence[GroupPlan], *, share: float = 0.0) -> Applied:
        """A sweep's decisions in write transactions of :data:`~plait.checkpoint._sweep.BATCH`
        groups each: the groups' top-level thread rows are read (and on PostgreSQL locked)
        first, and a group whose lease is live is left alone, so a run that took the lease
        after the sweep's listing keeps its thread, and a run that asks for it while this
        transaction holds the row waits and then finds the pruned head (or no thread). The
        changes are a few statements for the whole batch (:mod:`plait.checkpoint.sql._sweep`).
        ``BatchSql.lanes`` batches are under way at once (PostgreSQL: two, on two pooled
        connections, so that one batch's deletes run while the next is read and planned);
        their results come back in the plans' order.

        Where the plans' groups hold more than half of the listed checkpoints (``share``)
        and the dialect rebuilds (SQLite), all of them go in one transaction that empties the
        checkpoints, writes and blobs tables and writes back what stays: it holds the write
        lock for the whole sweep (about 3 s for 10,000 threads x 50 steps), about as long as the ``VACUUM`` that
        such a sweep is followed by, and less than half of what the batches held it in all.
        """
        sweep = self._sql_sweep
        if self._core.dialect.batch.rebuild and share > 0.5:
            now = self._now()
            return await self._bulk_writing(lambda cur: sweep.apply(cur, plans, now, rebuild=True))
        pruned: list[bool | None] = []
        removed = 0
        lanes = max(1, self._core.dialect.batch.lanes)
        running: list[asyncio.Future[Applied]] = []  # in the batches' order
        batches = [plans[start : start + BATCH] for start in range(0, len(plans), BATCH)]
        try:
            for at in range(len(batches) + lanes):
                if running and (len(running) == lanes or at >= len(batches)):
                    applied = await running.pop(0)
                    pruned += applied.pruned
                    removed += applied.removed
                if at < len(batches):
                    job = partial(sweep.apply, plans=batches[at], now=self._now())
                    running.append(asyncio.ensure_future(self._bulk_writing(job)))
        finally:
            for left in running:  # after a failure: the batches under way commit or not, alone
                left.cancel()
        return Applied(pruned, removed)

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        check_thread(lease.thread_id, lease.namespace)
        await self._leasing(lambda cur: self._core.threads.give_back(cur, lease, status, self._now()))
