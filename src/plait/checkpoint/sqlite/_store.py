"""SqliteCheckpointer: the embedded default store, one SQLite file (stdlib ``sqlite3``).

All SQL lives in :mod:`plait.checkpoint.sql`; this module owns the connections and threads.

Threads: writes use one connection, owned by a writer thread, and reads another, owned by a
reader thread (WAL lets readers proceed while the writer commits). An async call queues a
job and awaits a future that the worker resolves with ``loop.call_soon_threadsafe``; the
loop is taken at call time, so one checkpointer serves any number of event loops over its
life (the sync facade runs each ``invoke`` in its own). When the calling loop has nothing
else ready and the worker is idle, the job runs on the caller's thread instead, on the
worker's connection under its lock (see ``Worker.inline`` and
:func:`~plait.checkpoint.sql._caller.may_block`): the round trip to the worker would cost two
thread wake-ups for a caller that only waits.

Group commit: when several ``commit()`` calls are queued (many concurrent runs, or the
engine's async durability), the writer folds them into one transaction and pays one fsync
for all of them. Each caller's commit stays all-or-nothing: if the group fails, its commits
are retried one by one, so one bad commit does not sink the others.

Durability: ``synchronous="full"`` (the default) fsyncs every commit. ``"normal"`` is an
explicit opt-in: in WAL mode a commit then survives a crash of the process but not a power
loss or an OS crash (the last commits may be lost, the file stays consistent). With
``"full"``, the writer keeps zeroed room after the end of SQLite's log, so that an fsync'd
commit does not grow the file (:mod:`plait.checkpoint.sqlite._wal` says why and how).

Several processes may share one file: writes take the lock up front and wait for it (see
``_transaction``), and leases use the wall clock, which all processes on a machine share.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, TypeVar

import orjson

from plait._sqlite_busy import until_free
from plait._sync import run_sync, settle
from plait.checkpoint._validate import check_thread
from plait.checkpoint.base import Capabilities
from plait.checkpoint.feed import ChangeFeed
from plait.checkpoint.model import (
    Checkpoint,
    Lease,
)
from plait.checkpoint.retention import Retention
from plait.checkpoint.space import DeadSpace
from plait.checkpoint.sql._base import BatchSql, CommitRequest, Cursor, Dialect
from plait.checkpoint.sql._caller import may_block
from plait.checkpoint.sql._checkpointer import SqlCheckpointer
from plait.checkpoint.sql._core import SqlCore
from plait.checkpoint.sql._memory_sql import SQLITE_MEMORY_TABLES
from plait.checkpoint.sqlite._feed import SqliteFeed
from plait.checkpoint.sqlite._wal import WalReserve
from plait.checkpoint.sqlite._worker import (
    BULK_CACHE_KIB,
    Job,
    Worker,
    bulk_transaction,
    lease_transaction,
    snapshot,
    transaction,
)
from plait.errors import CheckpointError

__all__ = ["SqliteCheckpointer"]

T = TypeVar("T")

_DIALECT = Dialect(
    prefix="plait_",
    placeholder="?",
    blob="BLOB",
    real="REAL",
    serial_pk="INTEGER PRIMARY KEY",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    clock="?",
    no_limit=-1,
    keys="SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?)",
    keys_params=lambda keys: [orjson.dumps(keys).decode()],
    batch=BatchSql(
        rows=lambda n: "SELECT " + ", ".join(f"json_extract(value, '$[{i}]')" for i in range(n)) + " FROM json_each(?)",
        rebuild=True,
    ),
    table_exists="SELECT (SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?)",
    table_exists_param=lambda name: name,
    small_table=" WITHOUT ROWID",
    lazy_rows=True,
    migrations={10: SQLITE_MEMORY_TABLES},
)


class SqliteCheckpointer(SqlCheckpointer):
    """Checkpoints in one SQLite file, in WAL mode, one transaction per ``commit()``.

    The file is created and migrated when first opened (it is the embedded default, with
    nothing to administer); a file written by a newer plait is refused with
    :class:`~plait.errors.StoreVersionError`.

    Args:
        path: the database file (``":memory:"`` keeps it in memory, for tests).
        synchronous: ``"full"`` (default) fsyncs every commit; ``"normal"`` survives a process
            crash but not a power loss, and is faster.
        busy_timeout: seconds a write waits for another process holding the file's lock.
        lease_ttl: seconds a run's lease lasts unless renewed.
        clock: the lease clock (unix seconds, shared by every process using the file); tests
            pass one they advance by hand.
        retention: the policy :meth:`asweep` applies (see :class:`~plait.checkpoint.retention.Retention`).
    """

    capabilities = Capabilities(kind="sqlite", any_loop=True, change_feed=True, memory=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["full", "normal"] = "full",
        busy_timeout: float = 30.0,
        lease_ttl: float = 30.0,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.set_retention(retention)
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._store = f"SQLite database {self.path!r}"
        self._core = SqlCore(_DIALECT, self._store)
        self._closed = False
        self._set_up = False
        """Both connections were opened once: :meth:`asetup` has nothing left to do (a graph
        bound per run, as the API server binds one, calls it for every run)."""
        self._close_lock = threading.Lock()
        busy_ms = int(busy_timeout * 1000)
        # Room ahead of the log only pays where commits are fsync'd (see _wal).
        reserve = WalReserve(self.path) if synchronous == "full" and _has_file(self.path) else None
        self._reserve = reserve
        self._prepare = reserve.ahead if reserve is not None else None
        """Run at the start of each write transaction, under the write lock (see ``transaction``)."""
        self._writer = Worker(
            "plait-sqlite-writer",
            self._open_writer,
            self._store,
            busy_ms,
            fold=self._commit_all,
            closer=reserve.close if reserve is not None else None,
        )
        if self.path == ":memory:":
            self._reader = self._writer  # a second connection would see another database
        else:
            self._reader = Worker("plait-sqlite-reader", self._open_reader, self._store, busy_ms)

    @property
    def address(self) -> str | None:
        return None if self.path == ":memory:" else os.path.abspath(self.path)

    def achanges(
        self, *, namespace: str | None = None, thread_id: str | None = None, interval: float | None = None
    ) -> ChangeFeed:
        """``PRAGMA data_version`` on a read-only connection of its own, every ``interval``
        seconds (0.2 by default), then the thread rows that moved; an in-memory database,
        which no other connection sees, polls its listing instead."""
        if self.path == ":memory:":
            return super().achanges(namespace=namespace, thread_id=thread_id, interval=interval)
        return SqliteFeed(
            self.path, prefix=_DIALECT.prefix, interval=interval, namespace=namespace, thread_id=thread_id
        )

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every transaction is explicit.
        # check_same_thread=False: jobs may run on the caller's thread (Worker.inline),
        # always under the worker's lock, never two at once.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return conn

    def _open_writer(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            # Before the first table exists, so that a new file gives the pages that deleting
            # and pruning free back to the file system (see areclaim_space); in a file that has
            # tables already it only takes effect at the next VACUUM (plait db vacuum).
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            self._wal(conn)
            conn.execute("PRAGMA synchronous = " + ("FULL" if self.synchronous == "full" else "NORMAL"))
            if self._reserve is not None:
                ((pages,),) = conn.execute("PRAGMA wal_autocheckpoint").fetchall()
                ((page_size,),) = conn.execute("PRAGMA page_size").fetchall()
                self._reserve.restart_at = 32 + int(pages) * (int(page_size) + 24) if pages > 0 else None
            transaction(conn, lambda cur: self._core.component.migrate(cur, self._store))
        except BaseException:
            conn.close()
            raise
        return conn

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Put the file in WAL mode, waiting for other connections as a write would.

        Setting the journal mode can fail with SQLITE_BUSY at once, without the busy
        handler, while another process opens or migrates the same file (several processes
        starting together); it is retried until the busy timeout, like any other wait.
        """
        wal = "PRAGMA journal_mode = WAL"
        until_free(lambda: conn.execute(wal), patience=self.busy_timeout, pause=0.001, most=0.05)

    def _open_reader(self) -> sqlite3.Connection:
        self._writer.ready.wait()  # the writer creates or migrates the file first
        conn = self._connect()
        try:
            conn.execute("PRAGMA query_only = 1")
            self._core.component.check(conn.cursor(), self._store)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- running jobs ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"{self._store} is closed; create a new SqliteCheckpointer to use it again")

    async def _submit(
        self, worker: Worker, fn: Callable[[sqlite3.Connection], Any] | None, request: CommitRequest | None = None
    ) -> Any:
        """Run ``fn`` on ``worker``'s connection, or commit ``request`` (``fn`` None)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        # bounded: inline, the connection never waits for another process's lock (Worker.inline).
        if may_block(loop, bounded=True):
            ran, result = worker.inline(fn if fn is not None else partial(self._commit_one, request))
            if ran:
                return result
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any, error: BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, future, result, error)

        worker.put(Job(fn, request, done))
        return await future

    def _commit_all(self, conn: sqlite3.Connection, requests: list[CommitRequest]) -> list[Exception | None]:
        """Store ``requests`` in one transaction (the writer's fold: its group commit);
        per request, None when it is durable, else the exception that refused it."""
        return self._core.commit.commit_all(lambda fn: transaction(conn, fn, self._prepare), requests, self.clock)

    def _commit_one(self, request: CommitRequest | None, conn: sqlite3.Connection) -> None:
        """A commit run on the caller's thread (see :meth:`Worker.inline`)."""
        assert request is not None
        (error,) = self._commit_all(conn, [request])
        if error is not None:
            raise error

    # -- the SqlCheckpointer hooks ------------------------------------------------------------

    async def _writing(self, fn: Callable[[Cursor], T]) -> T:
        result: T = await self._submit(self._writer, lambda conn: transaction(conn, fn, self._prepare))
        return result

    async def _leasing(self, fn: Callable[[Cursor], T]) -> T:
        if self.synchronous == "normal":
            return await self._writing(fn)  # commits are not synced anyway: nothing to save
        result: T = await self._submit(self._writer, lambda conn: lease_transaction(conn, fn))
        return result

    async def _bulk_writing(self, fn: Callable[[Cursor], T]) -> T:
        result: T = await self._submit(self._writer, lambda conn: bulk_transaction(conn, fn, self._prepare))
        return result

    async def _reading(self, fn: Callable[[Cursor], T]) -> T:
        result: T = await self._submit(self._reader, lambda conn: snapshot(conn, fn))
        return result

    async def _reading_one(self, fn: Callable[[Cursor], T]) -> T:
        result: T = await self._submit(self._reader, lambda conn: fn(conn.cursor()))
        return result

    async def _committing(self, request: CommitRequest) -> None:
        await self._submit(self._writer, None, request)

    def _now(self) -> float:
        return self.clock()

    # -- the protocol ------------------------------------------------------------------------

    async def asetup(self) -> None:
        """Open (create or migrate) the file now rather than on first use; safe to repeat."""
        if self._set_up:
            self._check_open()
            return
        await self._submit(self._writer, lambda conn: None)
        await self._submit(self._reader, lambda conn: None)
        self._set_up = True

    def disk_bytes(self) -> int | None:
        if self.path == ":memory:":
            return None
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))

    async def areclaim_space(self, *, full: bool = False) -> int | None:
        """Give the pages that deleting and pruning freed back to the file system; the bytes
        the file and its log shrank by.

        Why: SQLite keeps freed pages inside the file for later writes, so deleting and
        pruning alone make room for new checkpoints but never make the file smaller. A file
        plait created is in ``auto_vacuum=INCREMENTAL`` mode: ``PRAGMA incremental_vacuum``
        then moves the last pages into the free ones and cuts the file's tail, in time
        proportional to what was freed, not to the database (what a sweeper runs after every
        pass). A truncating WAL checkpoint then copies the moved pages home and empties the log.

        A file made before that (``auto_vacuum=NONE``) gives nothing back this way: ``full=True``
        (``plait db vacuum``) rewrites it with ``VACUUM``, once, which also switches it to
        incremental mode. A full rewrite costs time and space proportional to what is kept (up
        to about twice the database while it runs) and holds the write lock throughout, so run
        it while nothing else writes. Concurrent readers keep working; a reader holding an old
        snapshot may leave the log untruncated until the next checkpoint.
        """
        before = self.disk_bytes()
        await self._submit(self._writer, partial(_reclaim, full=full))
        after = self.disk_bytes()
        return None if before is None or after is None else max(before - after, 0)

    async def avacuum(self) -> int | None:
        """:meth:`areclaim_space` with ``full=True``: rewrite the whole file (``VACUUM``)."""
        return await self.areclaim_space(full=True)

    def vacuum(self) -> int | None:
        """Sync :meth:`avacuum`."""
        return run_sync(self.avacuum())

    def _dead_space(self, cur: Cursor) -> DeadSpace | None:
        """The file's free pages (``freelist_count`` times ``page_size``): what deleting and
        pruning left in it, and which incremental vacuum gives back."""
        ((free,),) = cur.execute("PRAGMA freelist_count").fetchall()
        ((page,),) = cur.execute("PRAGMA page_size").fetchall()
        ((mode,),) = cur.execute("PRAGMA auto_vacuum").fetchall()
        reclaim = (
            "given back by the next sweep, plait db prune or plait db vacuum (incremental vacuum)"
            if int(mode) == _INCREMENTAL
            else "this file predates incremental vacuum: run plait db vacuum once (rewrites it; "
            "nothing else should write meanwhile)"
        )
        return DeadSpace(bytes=int(free) * int(page), reclaim=reclaim)

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        check_thread(thread_id, namespace)
        seconds = self.lease_ttl if ttl is None else ttl
        lease: Lease = await self._leasing(
            lambda cur: self._core.threads.take(cur, (namespace, thread_id), owner, seconds, self.clock())
        )
        return lease

    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        check_thread(lease.thread_id, lease.namespace)
        seconds = self.lease_ttl if ttl is None else ttl
        renewed: Lease = await self._leasing(lambda cur: self._core.threads.renew(cur, lease, seconds, self.clock()))
        return renewed

    async def atake_lease_and_get(
        self,
        thread_id: str,
        owner: str,
        checkpoint_id: str | None = None,
        *,
        namespace: str = "",
        ttl: float | None = None,
    ) -> tuple[Lease, Checkpoint | None]:
        """Take the thread's lease, then read the checkpoint a run starts from (as :meth:`aget`).

        Both in the lease's one write transaction: the read then sees every commit made
        before the lease (it holds the write lock), and costs no transaction of its own on
        the reader's connection (about a tenth of a resumed run's time, see
        docs/benchmarks.md, "W5 and W6"). A read that fails rolls the lease back with it, so
        nothing is left to give back.

        Reading the head here also tells this store where each of its values sits in its
        delta chain, so that the run's commits store what they append rather than whole
        values, even when another process wrote the head.
        """
        check_thread(thread_id, namespace, checkpoint_id)  # before the lease is taken
        seconds = self.lease_ttl if ttl is None else ttl
        key = (namespace, thread_id)

        def take_and_read(cur: Cursor) -> tuple[Lease, Checkpoint | None]:
            lease = self._core.threads.take(cur, key, owner, seconds, self.clock())
            return lease, self._core.read.get(cur, namespace, thread_id, checkpoint_id, resume=True)

        taken: tuple[Lease, Checkpoint | None] = await self._leasing(take_and_read)
        return taken

    def close(self) -> None:
        """Finish queued work, then close the connections and stop the threads. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._writer.stop()
        if self._reader is not self._writer:
            self._reader.stop()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> SqliteCheckpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({self.path!r}, synchronous={self.synchronous!r})"


_INCREMENTAL = 2
"""``PRAGMA auto_vacuum``'s answer for incremental mode (0 is none, 1 full)."""


def _reclaim(conn: sqlite3.Connection, *, full: bool) -> None:
    """Incremental vacuum, or with ``full`` a VACUUM that also switches the file to incremental
    mode (both run outside a transaction), then empty the WAL into the file."""
    if full:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
    else:
        ((mode,),) = conn.execute("PRAGMA auto_vacuum").fetchall()
        if int(mode) == _INCREMENTAL:
            _truncate_free_pages(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def _truncate_free_pages(conn: sqlite3.Connection) -> None:
    """Give every free page of an incremental-mode file back, in time linear in the pages.

    When more of the file is free than used (a sweep's ``keep_latest`` frees 95 % of it),
    ``VACUUM`` is cheaper still: it copies what is kept and never touches the free pages,
    where truncating moves every kept page from the file's tail and takes every free page
    off the list (1.2 s against 5.8 s for the 1.2 GB freed by sweeping 10,000 threads x 50
    steps). It costs temporary space the size of what is kept, and holds the write lock
    for as long as the truncation would.

    ``PRAGMA incremental_vacuum`` removes each free page it cuts off from the free list by
    searching the list for it, which is quadratic in the free pages: 7.8 of a 13.7 s sweep of
    2,000 threads x 50 steps, and most of a 152 s sweep of 10,000 (docs/benchmarks.md,
    "Sweeping"). Full auto-vacuum does the same work at commit and drops the whole free list
    at once instead; a file can switch between the two modes at any time (both keep the
    pointer maps), and setting the mode is itself a write transaction, so switching to full
    and back truncates the file once. A process that commits between the two switches
    truncates at its commit too, which is harmless; a crash between them leaves the file in
    full mode until the writer opens it next (it sets incremental mode).
    """
    ((free,),) = conn.execute("PRAGMA freelist_count").fetchall()
    ((pages,),) = conn.execute("PRAGMA page_count").fetchall()
    if int(free) == 0:
        return
    if 2 * int(free) > int(pages):
        conn.execute("VACUUM")  # the file keeps its incremental mode
        return
    ((cache,),) = conn.execute("PRAGMA cache_size").fetchall()
    conn.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")
    try:
        conn.execute("PRAGMA auto_vacuum = FULL")
    finally:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute(f"PRAGMA cache_size = {int(cache)}")


def _has_file(path: str) -> bool:
    """Whether ``path`` names a database file (not SQLite's in-memory or temporary database)
    on a system with ``os.pwrite``."""
    return path not in ("", ":memory:") and hasattr(os, "pwrite")
