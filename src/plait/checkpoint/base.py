"""Checkpoints and the Checkpointer protocol every backend implements.

A *thread* is one line of execution, keyed by ``(namespace, thread_id)``. A *checkpoint* is
the state of a thread after a super-step (or an input, a manual update, a fork): the channel
values, the tasks planned next, the join barriers, and metadata. Checkpoints form a tree
through ``parent_id``; the newest checkpoint of a thread is its head, and its history is the
walk from the head through the parents.

*Pending writes* are what tasks of the head's next super-step have produced so far: a
finished task's result, the recorded result of a ``once`` effect, a resume value, an
interrupt. They are saved on the checkpoint the tasks started from, so a crash mid-step
re-runs only the tasks whose results were not saved; when the step's new checkpoint commits
(with ``folds_parent_writes``), the parent's pending writes are deleted in the same
transaction, because they are now folded into the new checkpoint.

The protocol is deliberately small: one ``commit`` for every write (so a backend has one
transaction path to get right), reads, thread housekeeping, and the lease that keeps one run
per thread. A lease alone cannot stop a run that lost it (a stalled worker whose lease
expired and was taken over) from writing, so a commit can carry a :class:`Fence`, checked
inside the commit's own transaction: the fencing that makes one run per thread hold.
:func:`plait.testing.check_checkpointer` is its full contract.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from plait._sync import run_sync
from plait.checkpoint._cache_hooks import CacheHooks
from plait.checkpoint._stored_policy import StoredPolicy
from plait.checkpoint.feed import ChangeFeed, ListingFeed
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
from plait.checkpoint.retention import Retention
from plait.checkpoint.space import StoreSpace, ThreadSpace
from plait.errors import StoreUnsupportedError
from plait.store import MemorySearch, MemoryWrite, NamespaceListing, Store, StoredItem

__all__ = ["Capabilities", "Checkpointer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a backend can do beyond the protocol, declared instead of guessed: the engine
    and the tools look here, never at a backend's class."""

    any_loop: bool = False
    """Its async methods may be called from any event loop and any thread (its I/O runs on
    threads of its own, or needs none). A run on it renews its lease from a plain thread,
    so that a node blocking the loop cannot starve the renewal; on other backends a task on
    the run's own loop renews it, and lone sync nodes then run in worker threads."""

    kind: str = ""
    """What family the backend is of (``memory``, ``file``, ``sqlite``, ``postgres``), as the
    command line and the Studio name it; a backend of another family names its own."""
    memory: bool = False
    """It keeps a memory store (:class:`plait.Store`) in its own database: its commits take
    memory writes (``acommit(memory=...)``) in the same transaction as their checkpoints,
    and its ``*_memory`` reads answer (see :class:`~plait.store.records.MemoryBackend`)."""
    change_feed: bool = False
    """Its :meth:`Checkpointer.achanges` watches the store itself (an in-process notice,
    file times, a version counter, LISTEN/NOTIFY), so a change is reported within a short
    poll or sooner and costs nothing while nothing changes. False: the protocol's fallback,
    which lists every thread at each poll (see :mod:`plait.checkpoint.feed`)."""


class Checkpointer(StoredPolicy, CacheHooks, ABC):
    """Where checkpoints live. One implementation per backend; async, one ``commit`` path,
    with a sync twin of every method (``get`` for ``aget``, ...), as the graph API has.

    Implementations must make every ``commit`` atomic (all its checkpoints and writes, or
    none), keep every committed checkpoint readable after a crash at any instruction, and
    never run code while loading (JSON data only). Thread ids and metadata are data, never
    parts of a path or of SQL text.

    What a backend refuses or reports is the same everywhere: a call naming a thread id,
    namespace or checkpoint id outside the id rule raises
    :class:`~plait.errors.InvalidIdError` before anything is written, locked or read; a
    commit holding a field of another type than its record declares (a pending write of an
    unknown kind, say) raises :class:`~plait.errors.InvalidRecordError`, storing nothing;
    stored data that a read cannot take (fields of other types, a lineage whose parent links
    loop) raises :class:`~plait.errors.CheckpointCorruptError` naming the thread and the
    checkpoint, and a failure of the storage underneath (a full disk, a server nothing
    answers at) a :class:`~plait.errors.CheckpointError` saying what to do.
    :func:`plait.testing.check_checkpointer` is the contract.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()
    lease_ttl: float = 30.0
    retention: Retention | None = None
    """The policy :meth:`asweep` applies to threads without one of their own (every backend
    takes it as the constructor argument ``retention=``); None: only threads with a policy
    in their metadata are swept."""
    memory_refusal: ClassVar[str] = (
        "its class does not implement the memory store; use SqliteCheckpointer, "
        "PostgresCheckpointer or MemoryCheckpointer, or plait.Store() for memory in this process"
    )
    """Why a backend without ``Capabilities.memory`` keeps no memory store (its
    :class:`~plait.errors.StoreUnsupportedError` says it)."""
    """Seconds a run's lease on a thread lasts unless renewed (every backend takes it as a
    constructor argument)."""

    async def asetup(self) -> None:
        """Create or migrate storage. Safe to call more than once."""

    def disk_bytes(self) -> int | None:
        """The bytes the store takes on this machine's disk (a SQLite file with its log, a file
        store's folder); None where that is not known here (a database server, memory)."""
        return None

    async def areclaim_space(self, *, full: bool = False) -> int | None:
        """Give the space that deleted and pruned checkpoints left back to the file system;
        the bytes given back (None where that is not known here).

        Cheap by default, so that a sweeper can call it after every pass: SQLite runs an
        incremental vacuum, which moves no live page that need not move (a file made before
        plait set ``auto_vacuum=INCREMENTAL`` gives nothing back this way); the file store gave
        its space back when it deleted or rewrote a thread's file (0); PostgreSQL leaves it to
        autovacuum (None). ``full=True`` is an operator's one-off (``plait db vacuum``): SQLite
        rewrites the whole file (``VACUUM``, which also turns on incremental vacuum in an older
        file), PostgreSQL runs ``VACUUM`` on plait's tables.
        """
        return 0 if self.disk_bytes() is not None else None

    def reclaim_space(self, *, full: bool = False) -> int | None:
        """Sync :meth:`areclaim_space`."""
        return run_sync(self.areclaim_space(full=full))

    async def aspace(self) -> StoreSpace:
        """Where the store's space goes: one :class:`~plait.checkpoint.space.ThreadSpace` per
        stored ``(namespace, thread_id)`` and the dead space it holds, where it can tell
        (:func:`plait.checkpoint.space.summarize` folds subgraphs into their threads).

        This default counts the listed threads' checkpoints and knows no bytes; a backend
        that knows its sizes overrides it."""
        listed = await self.alist_threads(namespace=None)
        return StoreSpace(
            threads=[
                ThreadSpace(namespace=t.namespace, thread_id=t.thread_id, checkpoints=t.checkpoints, bytes=None)
                for t in listed
            ]
        )

    def space(self) -> StoreSpace:
        """Sync :meth:`aspace`."""
        return run_sync(self.aspace())

    @property
    def address(self) -> str | None:
        """The address :func:`plait.checkpoint.open` takes back (with :attr:`address_options`)
        to open this same store again, from this process or another; None when no other
        checkpointer can reach it (memory, an in-memory SQLite database)."""
        return None

    @property
    def address_options(self) -> Mapping[str, Any]:
        """The keyword arguments :func:`plait.checkpoint.open` needs beside :attr:`address`
        to reach the same data (a PostgreSQL schema), and nothing else."""
        return {}

    def achanges(
        self, *, namespace: str | None = None, thread_id: str | None = None, interval: float | None = None
    ) -> ChangeFeed:
        """The threads that change from now on, as they change, whichever process changes
        them: an async iterator of :class:`~plait.checkpoint.feed.ThreadChange` records
        (see :mod:`plait.checkpoint.feed` for the contract).

        Args:
            namespace: only the threads of this namespace (None: every namespace).
            thread_id: only this thread.
            interval: seconds between two looks where the feed polls (None: its default).

        This default polls the listing (:class:`~plait.checkpoint.feed.ListingFeed`); a
        backend that can do better overrides it and sets ``Capabilities.change_feed``.

        Example::

            async with store.achanges(thread_id="t1") as feed:
                while await feed.next(timeout=30) is not None:
                    print(await store.aget_thread("t1"))
        """
        return ListingFeed(
            lambda limit, before: self.alist_threads(namespace=namespace, limit=limit, before=before),
            interval=interval,
            namespace=namespace,
            thread_id=thread_id,
        )

    def known_head(self, thread_id: str, *, namespace: str = "") -> Checkpoint | None:
        """The thread's head as this checkpointer last committed it, if it remembers one that
        has no pending writes; None otherwise (the default: remembers nothing).

        A hint that saves a read, never the truth: another process may have moved the head
        or added pending writes since. A commit built on it must say so with
        ``Fence(expect_head=head.id, expect_no_writes=True)``, and read the thread when that
        fence refuses it. Never blocks (no I/O).
        """
        return None

    def known_checkpoint(self, thread_id: str, checkpoint_id: str, *, namespace: str = "") -> Checkpoint | None:
        """A past checkpoint this checkpointer read for a write on it (:meth:`aget_for_write`)
        and remembers, without pending writes; None otherwise (the default). A hint, as
        :meth:`known_head` is: a commit built on it must say so with
        ``Fence(expect_parent_no_writes=True)`` and read the checkpoint when refused. No I/O.
        """
        return None

    @abstractmethod
    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        """Store new checkpoints, pending writes and memory writes in one atomic transaction.

        ``memory`` (a step's memory writes, or a :class:`plait.Store`'s put) is applied in
        order after the rest, in the same transaction; a backend without
        ``Capabilities.memory`` refuses any with :class:`~plait.errors.StoreUnsupportedError`.

        Checkpoints are applied in order (a later one may have an earlier one as parent);
        pending writes replace any saved with the same ``(task_id, kind, key)``. With a
        ``fence``, its conditions are checked in the same transaction (see :class:`Fence`).
        A commit that is not a run's step (no fence, or a fence without a token) also sets
        how each thread it touches stands at rest (see :mod:`plait.checkpoint.lease`).

        Raises:
            LeaseLostError: the fence's lease is no longer the thread's current one.
            ThreadBusyError: a one-off write found a live lease.
            ConcurrentUpdateError: the fence found another head than it expected.
        """

    @abstractmethod
    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        """The thread's head (newest) checkpoint, or the one with ``checkpoint_id``, with its
        pending writes; None when there is none."""

    async def aget_with_status(
        self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> tuple[Checkpoint | None, Status | None]:
        """:meth:`aget`, and how the thread stands (:attr:`ThreadInfo.status`; None when the
        thread has no checkpoint): what reading a thread's state needs. This default makes
        both calls; the SQL backends read both in one transaction, the status from the
        thread's row alone."""
        cp = await self.aget(thread_id, checkpoint_id, namespace=namespace)
        if cp is None:
            return None, None
        info = await self.aget_thread(thread_id, namespace=namespace)
        return cp, None if info is None else info.status

    async def aget_for_write(
        self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> Checkpoint | None:
        """:meth:`aget` of the checkpoint a write is about to build on (an update of a past
        checkpoint): a backend that stores deltas may remember its values, so that the
        write is stored as deltas against them without reading its parent again."""
        return await self.aget(thread_id, checkpoint_id, namespace=namespace)

    async def aget_with_head(
        self, thread_id: str, checkpoint_id: str, *, namespace: str = ""
    ) -> tuple[Checkpoint | None, str | None]:
        """:meth:`aget` of ``checkpoint_id``, and the thread's head id (None: none): whether a
        fork forks a step under way. This default makes both calls; SQL reads both at once."""
        cp = await self.aget(thread_id, checkpoint_id, namespace=namespace)
        head = await self.aget(thread_id, namespace=namespace)
        return cp, None if head is None else head.id

    @abstractmethod
    async def ahistory(
        self,
        thread_id: str,
        *,
        namespace: str = "",
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Checkpoint]:
        """Checkpoints newest first, walking parent ids from the head (or from the parent of
        ``before``), keeping those whose metadata has every ``filter`` key equal to its
        value, at most ``limit``. Pending writes are not included."""

    @abstractmethod
    async def atree(self, thread_id: str, *, namespace: str = "") -> dict[str, str | None]:
        """Every checkpoint of the thread, each branch's too, as its id mapped to its
        parent's id (None for a first one), oldest first; {} for an unknown thread.

        :meth:`ahistory` follows one branch; this is the thread's whole shape, read without
        any state, for whoever shows or walks its branches (the LangGraph API's history
        lists every branch, and a chat UI offers "1 / 2" where an edit forked one)."""

    @abstractmethod
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
        """Threads that have a checkpoint (of ``namespace``, or of all namespaces), most
        recently active first (:attr:`ThreadInfo.updated_at`), filtered by ``status``, by
        ``prefix`` (thread ids that start with it; None or "" for all) and by ``metadata``
        (heads whose metadata contains it: ``{"user": "ada"}`` keeps heads whose ``user``
        is ``"ada"``; nested objects match by containment, lists and scalars by equality,
        with no coercion: ``1`` matches ``1.0``, never ``true`` or ``"1"``; None or {} for
        all), and paged in the store: at most ``limit``, starting after the thread whose
        :attr:`ThreadInfo.cursor` is ``before``. Every filter runs in the store, so a page costs what it returns plus
        what the store scans to find it, never every thread read into Python.

        A holder that died on this machine less than a lease's life ago is still ``busy``
        to the store's filter; the listed :attr:`ThreadInfo.status` then says ``stale``.

        Raises:
            ValueError: an unknown status, a limit below 1, a ``before`` that is not a cursor,
                a ``prefix`` that is not a str, or a ``metadata`` that is not a JSON object.
        """

    async def aget_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None:
        """How one thread stands (its status, head and lease); None when it has no checkpoint.

        This default scans the listing; backends look the thread up directly.
        """
        for info in await self.alist_threads(namespace=namespace):
            if info.thread_id == thread_id:
                return info
        return None

    @abstractmethod
    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        """Remove a thread and everything stored for it (no error if it does not exist).

        A run holding the thread's lease loses it: its next write raises
        :class:`~plait.errors.LeaseLostError` instead of bringing the thread back.
        """

    @abstractmethod
    async def aprune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int:
        """Drop checkpoints of a thread in one atomic step, keeping what the kept ones need;
        returns how many were dropped.

        Say what to keep in exactly one way: ``keep_last``, the ``keep_last`` newest of every
        branch head's lineage (old history goes); or ``newer_than``, a checkpoint id: every
        checkpoint written after it goes, so that it is the thread's head again (what a
        rolled-back run wrote goes, branches made before it stay), and the thread's lease is
        revoked, since a run holding it was writing onto what went.

        With ``branches=False`` only the lineage of the head that remains is kept of that:
        time-travel branches go too (``keep_last=1, branches=False`` keeps the head alone,
        with the stored values it is built on and its pending writes).

        Raises:
            ValueError: neither or both of them given, or ``keep_last`` < 1.
            CheckpointNotFoundError: ``newer_than`` is not a checkpoint of the thread.
        """

    @abstractmethod
    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        """Take the thread's run lease for ``owner``: a new generation, held by this process.

        Taken when no lease is held, when the held one expired, or when its holder is
        provably dead (on this machine: see :class:`~plait.checkpoint.holder.Holder`).

        Raises:
            ThreadBusyError: a live lease is held (by whom, whether that process is alive
                on this machine, and when its lease ends).
        """

    @abstractmethod
    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        """Extend ``lease`` by ``ttl`` (default :attr:`lease_ttl`) from now; never takes a
        lost lease back.

        Raises:
            LeaseLostError: the lease is no longer the thread's current one (taken over,
                given back, revoked), whether or not it expired.
        """

    @abstractmethod
    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        """Give ``lease`` back, leaving the thread ``status`` (None: as it was); nothing
        happens when it is no longer the thread's current lease."""

    async def atake_lease_and_get(
        self,
        thread_id: str,
        owner: str,
        checkpoint_id: str | None = None,
        *,
        namespace: str = "",
        ttl: float | None = None,
    ) -> tuple[Lease, Checkpoint | None]:
        """Take the thread's lease for ``owner``, then read the checkpoint a run starts from
        (as :meth:`aget`): what a run does first.

        The read must see every commit made before the lease was taken (the previous
        owner's last one included). This default makes the two calls; a backend may do both
        in one round trip.

        A read that fails gives the lease back before the error is raised.

        Raises:
            ThreadBusyError: a live lease is held (nothing is read).
            InvalidIdError: an id breaks the id rule (nothing is taken or read).
        """
        from plait.checkpoint._validate import check_thread  # (it imports this module)

        check_thread(thread_id, namespace, checkpoint_id)
        lease = await self.atake_lease(thread_id, owner, namespace=namespace, ttl=ttl)
        try:
            return lease, await self.aget(thread_id, checkpoint_id, namespace=namespace)
        except BaseException:  # a run that cannot read where it starts does not start: no lease left
            with contextlib.suppress(Exception):
                await self.arelease_lease(lease)
            raise

    async def aclose(self) -> None:
        """Release connections and files."""

    # -- retention -----------------------------------------------------------------------------

    def store_time(self) -> float:
        """The store's clock now (unix seconds): the lease clock the backend was given, else
        this machine's. Idle times of retention are measured by it."""
        clock = getattr(self, "clock", None)
        return float(clock()) if callable(clock) else time.time()

    # -- the sync facade: one line each over the async methods (as CompiledGraph's) ------------

    # -- the memory store (plait.Store), where the backend keeps one ------------------------------

    @property
    def store(self) -> Store:
        """The memory store in this checkpointer's database, with default options (the same
        object every time): ``graph.compile(checkpointer=cp, store=cp.store)``.

        Raises:
            StoreUnsupportedError: this backend keeps no memory store.
        """
        found: Store | None = self.__dict__.get("_plait_store")
        if found is None:
            found = self.__dict__["_plait_store"] = Store(self)
        return found

    def check_memory(self) -> None:
        """Raise :class:`~plait.errors.StoreUnsupportedError` unless it keeps a memory store."""
        if not self.capabilities.memory:
            raise StoreUnsupportedError(repr(self), self.memory_refusal)

    async def aget_memory(self, namespace: tuple[str, ...], key: str, *, now: int, refresh: bool) -> StoredItem | None:
        """A memory item (see :class:`~plait.store.records.MemoryBackend`)."""
        self.check_memory()
        raise NotImplementedError

    async def asearch_memory(self, search: MemorySearch) -> list[StoredItem]:
        """The memory items ``search`` finds (see :class:`~plait.store.records.MemoryBackend`)."""
        self.check_memory()
        raise NotImplementedError

    async def alist_memory_namespaces(self, listing: NamespaceListing) -> list[tuple[str, ...]]:
        """The memory namespaces ``listing`` finds (see :class:`~plait.store.records.MemoryBackend`)."""
        self.check_memory()
        raise NotImplementedError

    async def asweep_memory(self, *, now: int) -> int:
        """Delete the memory items expired at ``now`` (see :class:`~plait.store.records.MemoryBackend`)."""
        self.check_memory()
        raise NotImplementedError

    def setup(self) -> None:
        """Sync :meth:`asetup`."""
        run_sync(self.asetup())

    def commit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        """Sync :meth:`acommit`."""
        run_sync(self.acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory))

    def get(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        """Sync :meth:`aget`."""
        return run_sync(self.aget(thread_id, checkpoint_id, namespace=namespace))

    def history(
        self,
        thread_id: str,
        *,
        namespace: str = "",
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Checkpoint]:
        """Sync :meth:`ahistory`."""
        return run_sync(self.ahistory(thread_id, namespace=namespace, limit=limit, before=before, filter=filter))

    def tree(self, thread_id: str, *, namespace: str = "") -> dict[str, str | None]:
        """Sync :meth:`atree`."""
        return run_sync(self.atree(thread_id, namespace=namespace))

    def list_threads(
        self,
        *,
        namespace: str | None = None,
        status: Status | None = None,
        limit: int | None = None,
        before: str | None = None,
        prefix: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[ThreadInfo]:
        """Sync :meth:`alist_threads`."""
        return run_sync(
            self.alist_threads(
                namespace=namespace, status=status, limit=limit, before=before, prefix=prefix, metadata=metadata
            )
        )

    def get_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None:
        """Sync :meth:`aget_thread`."""
        return run_sync(self.aget_thread(thread_id, namespace=namespace))

    def delete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        """Sync :meth:`adelete_thread`."""
        run_sync(self.adelete_thread(thread_id, namespace=namespace))

    def prune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int:
        """Sync :meth:`aprune`."""
        return run_sync(
            self.aprune(thread_id, keep_last=keep_last, newer_than=newer_than, namespace=namespace, branches=branches)
        )

    def take_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        """Sync :meth:`atake_lease`."""
        return run_sync(self.atake_lease(thread_id, owner, namespace=namespace, ttl=ttl))

    def renew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        """Sync :meth:`arenew_lease`."""
        return run_sync(self.arenew_lease(lease, ttl=ttl))

    def release_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        """Sync :meth:`arelease_lease`."""
        run_sync(self.arelease_lease(lease, status=status))

    def take_lease_and_get(
        self,
        thread_id: str,
        owner: str,
        checkpoint_id: str | None = None,
        *,
        namespace: str = "",
        ttl: float | None = None,
    ) -> tuple[Lease, Checkpoint | None]:
        """Sync :meth:`atake_lease_and_get`."""
        return run_sync(self.atake_lease_and_get(thread_id, owner, checkpoint_id, namespace=namespace, ttl=ttl))

    def close(self) -> None:
        """Sync :meth:`aclose`."""
        run_sync(self.aclose())
