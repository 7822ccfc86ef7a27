"""SqliteCheckpointer: the embedded default store, one SQLite file (stdlib ``sqlite3``).

All SQL lives in :mod:`plait.checkpoint._sql`; this module owns the connections and threads.

Threads: writes use one connection, owned by a writer thread, and reads another, owned by a
reader thread (WAL lets readers proceed while the writer commits). An async call queues a
job and awaits a future that the worker resolves with ``loop.call_soon_threadsafe``; the
loop is taken at call time, so one checkpointer serves any number of event loops over its
life (the sync facade runs each ``invoke`` in its own). When the calling loop has nothing
else ready and the worker is idle, the job runs on the caller's thread instead, on the
worker's connection under its lock (see ``_Worker.inline``): the round trip to the worker
would cost two thread wake-ups for a caller that only waits.

Group commit: when several ``commit()`` calls are queued (many concurrent runs, or the
engine's async durability), the writer folds them into one transaction and pays one fsync
for all of them. Each caller's commit stays all-or-nothing: if the group fails, its commits
are retried one by one, so one bad commit does not sink the others.

Durability: ``synchronous="full"`` (the default) fsyncs every commit. ``"normal"`` is an
explicit opt-in: in WAL mode a commit then survives a crash of the process but not a power
loss or an OS crash (the last commits may be lost, the file stays consistent). With
``"full"``, the writer keeps zeroed room after the end of SQLite's log, so that an fsync'd
commit does not grow the file (:mod:`plait.checkpoint._sqlite_wal` says why and how).

Several processes may share one file: writes take the lock up front and wait for it (see
``_transaction``), and leases use the wall clock, which all processes on a machine share.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

import orjson

from plait._sync import run_sync
from plait.checkpoint._common import loop_is_idle
from plait.checkpoint._sql import CommitRequest, Cursor, Dialect, SqlCore
from plait.checkpoint._sqlite_wal import WalReserve
from plait.checkpoint._validate import check_id, check_thread
from plait.checkpoint.base import (
    Capabilities,
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    Fence,
    Lease,
    RestStatus,
    Status,
    ThreadInfo,
    WritesBatch,
    read_or_release,
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
    table_exists="SELECT (SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?)",
    table_exists_param=lambda name: name,
    small_table=" WITHOUT ROWID",
    lazy_rows=True,
)
_MAX_GROUP = 256
_STOP: Any = object()


@dataclass(slots=True)
class _Job:
    fn: Callable[[sqlite3.Connection], Any] | None
    request: CommitRequest | None
    done: Callable[[Any, BaseException | None], None]


class _Worker:
    """A thread that owns one connection and runs jobs from a queue, in order.

    A job may also run on the caller's thread (:meth:`inline`) when the worker is idle: a
    round trip to the worker and back costs two thread wake-ups (about 80-250 µs on a small
    virtual machine, as much as an fsync), which a lone caller waiting for the result gains
    nothing from. The connection's lock keeps the two paths from ever using it at once.
    """

    def __init__(
        self,
        name: str,
        opener: Callable[[], sqlite3.Connection],
        core: SqlCore,
        store: str,
        busy_ms: int,
        *,
        clock: Callable[[], float] = time.time,
        prepare: Callable[[], None] | None = None,
        closer: Callable[[], None] | None = None,
    ) -> None:
        self._opener = opener
        self._clock = clock
        self.prepare = prepare
        """Run at the start of each write transaction, under the write lock (see _transaction)."""
        self._closer = closer
        self._busy_ms = busy_ms
        self._waits = True
        """Whether the connection's busy timeout is ``busy_ms`` (the worker's) or 0 (inline)."""
        self._core = core
        self._store = store
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._conn: sqlite3.Connection | None = None
        self._broken: BaseException | None = None
        self._lock = threading.Lock()
        """Held while the connection is in use, by the worker or by an inline caller."""
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: _Job) -> None:
        self._queue.put(job)

    def stop(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()

    def inline(self, fn: Callable[[sqlite3.Connection], Any]) -> tuple[bool, Any]:
        """Run ``fn`` on the calling thread if the worker is idle; ``(False, None)`` if not.

        Idle means: its connection is open, nothing is queued and no job is running. A busy
        worker is left to group what is queued (group commit); a caller that finds it busy
        queues its job like any other. Inline, the connection's busy timeout is 0, so that a
        caller (maybe an event loop) never waits for another process's lock: SQLITE_BUSY,
        which can only come before anything is written (at BEGIN IMMEDIATE, or a reader's
        first read), rolls back and also means "not run", and the worker, which waits, runs it.

        Raises:
            Exception: what ``fn`` raised, translated as the worker would.
        """
        if self._conn is None or not self._queue.empty() or not self._lock.acquire(blocking=False):
            return False, None
        try:
            conn = self._conn
            if conn is None:  # closed meanwhile
                return False, None
            if self._waits:
                conn.execute("PRAGMA busy_timeout = 0")
                self._waits = False
            return True, fn(conn)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return False, None
            raise self._translate(exc) from exc
        except (sqlite3.Error, OSError) as exc:
            raise self._translate(exc) from exc
        finally:
            self._lock.release()

    def _run(self) -> None:
        try:
            self._conn = self._opener()
        except BaseException as exc:
            self._broken = exc
        self.ready.set()
        held: Any = None
        while True:
            job = held if held is not None else self._queue.get()
            held = None
            if job is _STOP:
                break
            if job.request is None:
                with self._lock:
                    self._restore_busy_timeout()
                    self._run_one(job)
                continue
            group = [job]
            while len(group) < _MAX_GROUP:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP or nxt.request is None:
                    held = nxt
                    break
                group.append(nxt)
            with self._lock:
                self._restore_busy_timeout()
                self._run_group(group)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._closer is not None:
                self._closer()

    def _restore_busy_timeout(self) -> None:
        """Give the connection back its busy timeout after an inline job set it to 0."""
        if not self._waits and self._conn is not None:
            self._conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            self._waits = True

    def _run_one(self, job: _Job) -> None:
        if self._broken is not None or self._conn is None:
            job.done(None, None if self._broken is None else self._translate(self._broken))
            return
        assert job.fn is not None
        try:
            result = job.fn(self._conn)
        except Exception as exc:
            job.done(None, self._translate(exc))
        else:
            job.done(result, None)

    def _run_group(self, group: list[_Job]) -> None:
        if self._broken is not None or self._conn is None:
            for job in group:
                job.done(None, None if self._broken is None else self._translate(self._broken))
            return
        conn = self._conn
        requests = [job.request for job in group if job.request is not None]
        results = self._core.commit_all(lambda fn: _transaction(conn, fn, self.prepare), requests, self._clock)
        for job, error in zip(group, results, strict=True):
            job.done(None, None if error is None else self._translate(error))

    def _translate(self, exc: BaseException) -> BaseException:
        """The store's error for what SQLite (or the file system under it) raised."""
        if isinstance(exc, sqlite3.Error | OSError):
            err = CheckpointError(_failure(self._store, exc))
            err.__cause__ = exc
            return err
        return exc


def _failure(store: str, exc: sqlite3.Error | OSError) -> str:
    """What went wrong, said for a person: a full disk with what to do about it."""
    code = getattr(exc, "sqlite_errorcode", None)
    if (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or getattr(exc, "errno", None) in _DISK_FULL:
        return (
            f"{store}: the disk is full ({exc}), so the transaction was rolled back and nothing of it was "
            "stored; every checkpoint committed before stays readable. Free some space on that disk, then retry."
        )
    return f"{store}: {type(exc).__name__}: {exc}"


_DISK_FULL = frozenset((errno.ENOSPC, errno.EDQUOT))


def _transaction(conn: sqlite3.Connection, fn: Callable[[Cursor], T], prepare: Callable[[], None] | None = None) -> T:
    """Run ``fn`` in a write transaction and commit.

    BEGIN IMMEDIATE takes the write lock before the first statement, waiting up to the busy
    timeout for another process to finish. A deferred BEGIN would start as a reader and
    fail to upgrade to a writer (SQLITE_BUSY, with no waiting, to avoid a deadlock) when
    another process wrote in between, which would fail commits under contention.
    ``prepare`` runs once the lock is held (the writer's :class:`WalReserve`).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        if prepare is not None:
            prepare()
        result = fn(conn.cursor())
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _lease_transaction(conn: sqlite3.Connection, fn: Callable[[Cursor], T]) -> T:
    """Run a lease transaction without fsync, then restore the connection's durability.

    A lease lost in a power failure is harmless: a lost acquire expires by itself, and a lost
    release only makes the next run wait for the expiry. Syncing it would make every run pay
    two fsyncs (acquire and release) for nothing. The transaction stays atomic and takes the
    write lock like any other; only its flush to disk is left to the next synced commit.

    Both pragmas are set outside any transaction (SQLite applies them per connection, and
    they are restored before the writer runs its next job). Automatic WAL checkpoints are
    held off meanwhile: one run by an unsynced commit would copy pages into the database
    file without syncing it, and a later commit could then reuse the WAL before those pages
    reach the disk, which a power failure would turn into a damaged file.
    """
    (pages,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone()
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA synchronous = OFF")
    try:
        return _transaction(conn, fn)
    finally:
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def _snapshot(conn: sqlite3.Connection, fn: Callable[[Cursor], T]) -> T:
    """Run reads in one transaction, so they see a single committed state."""
    conn.execute("BEGIN")
    try:
        return fn(conn.cursor())
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


class SqliteCheckpointer(Checkpointer):
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
    """

    capabilities = Capabilities(any_loop=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["full", "normal"] = "full",
        busy_timeout: float = 30.0,
        lease_ttl: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._store = f"SQLite database {self.path!r}"
        self._core = SqlCore(_DIALECT, self._store)
        self._closed = False
        self._close_lock = threading.Lock()
        busy_ms = int(busy_timeout * 1000)
        # Room ahead of the log only pays where commits are fsync'd (see _sqlite_wal).
        reserve = WalReserve(self.path) if synchronous == "full" and _has_file(self.path) else None
        self._reserve = reserve
        self._writer = _Worker(
            "plait-sqlite-writer",
            self._open_writer,
            self._core,
            self._store,
            busy_ms,
            clock=clock,
            prepare=reserve.ahead if reserve is not None else None,
            closer=reserve.close if reserve is not None else None,
        )
        if self.path == ":memory:":
            self._reader = self._writer  # a second connection would see another database
        else:
            self._reader = _Worker("plait-sqlite-reader", self._open_reader, self._core, self._store, busy_ms)

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every transaction is explicit.
        # check_same_thread=False: jobs may run on the caller's thread (_Worker.inline),
        # always under the worker's lock, never two at once.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return conn

    def _open_writer(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            self._wal(conn)
            conn.execute("PRAGMA synchronous = " + ("FULL" if self.synchronous == "full" else "NORMAL"))
            if self._reserve is not None:
                ((pages,),) = conn.execute("PRAGMA wal_autocheckpoint").fetchall()
                ((page_size,),) = conn.execute("PRAGMA page_size").fetchall()
                self._reserve.restart_at = 32 + int(pages) * (int(page_size) + 24) if pages > 0 else None
            _transaction(conn, self._core.migrate)
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
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _open_reader(self) -> sqlite3.Connection:
        self._writer.ready.wait()  # the writer creates or migrates the file first
        conn = self._connect()
        try:
            conn.execute("PRAGMA query_only = 1")
            self._core.check_version(conn.cursor())
        except BaseException:
            conn.close()
            raise
        return conn

    # -- running jobs ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"{self._store} is closed; create a new SqliteCheckpointer to use it again")

    async def _submit(
        self, worker: _Worker, fn: Callable[[sqlite3.Connection], Any] | None, request: CommitRequest | None = None
    ) -> Any:
        self._check_open()
        loop = asyncio.get_running_loop()
        if loop_is_idle(loop):
            ran, result = worker.inline(fn if fn is not None else partial(self._commit_one, request))
            if ran:
                return result
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any, error: BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, result, error)

        worker.put(_Job(fn, request, done))
        return await future

    def _commit_one(self, request: CommitRequest | None, conn: sqlite3.Connection) -> None:
        """A commit run on the caller's thread (see :meth:`_Worker.inline`)."""
        assert request is not None
        (error,) = self._core.commit_all(lambda fn: _transaction(conn, fn, self._writer.prepare), [request], self.clock)
        if error is not None:
            raise error

    def _write(self, fn: Callable[[Cursor], T]) -> Any:
        return self._submit(self._writer, lambda conn: _transaction(conn, fn, self._writer.prepare))

    def _lease(self, fn: Callable[[Cursor], T]) -> Any:
        if self.synchronous == "normal":
            return self._write(fn)  # commits are not synced anyway: nothing to save
        return self._submit(self._writer, lambda conn: _lease_transaction(conn, fn))

    def _read(self, fn: Callable[[Cursor], T]) -> Any:
        return self._submit(self._reader, lambda conn: _snapshot(conn, fn))

    # -- the protocol ------------------------------------------------------------------------

    async def asetup(self) -> None:
        """Open (create or migrate) the file now rather than on first use; safe to repeat."""
        await self._submit(self._writer, lambda conn: None)
        await self._submit(self._reader, lambda conn: None)

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
    ) -> None:
        if not checkpoints and not writes:
            return
        request = CommitRequest(checkpoints=checkpoints, writes=writes, fence=fence)
        self._core.check_request(request)
        await self._submit(self._writer, None, request)

    def known_head(self, thread_id: str, *, namespace: str = "") -> Checkpoint | None:
        return self._core.known_head(namespace, thread_id)

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        check_thread(thread_id, namespace, checkpoint_id)
        result: Checkpoint | None = await self._read(
            lambda cur: self._core.get(cur, namespace, thread_id, checkpoint_id)
        )
        return result

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
        result: list[Checkpoint] = await self._read(
            lambda cur: self._core.history(cur, namespace, thread_id, limit=limit, before=before, filter=filter)
        )
        return result

    async def alist_threads(
        self,
        *,
        namespace: str | None = None,
        status: Status | None = None,
        limit: int | None = None,
        before: str | None = None,
        prefix: str | None = None,
    ) -> list[ThreadInfo]:
        if namespace is not None:
            check_id(namespace, "namespace")
        result: list[ThreadInfo] = await self._read(
            lambda cur: self._core.list_threads(
                cur, namespace=namespace, status=status, limit=limit, before=before, prefix=prefix, now=self.clock()
            )
        )
        return result

    async def aget_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None:
        check_thread(thread_id, namespace)
        result: ThreadInfo | None = await self._read(
            lambda cur: self._core.thread(cur, namespace, thread_id, self.clock())
        )
        return result

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        await self._write(lambda cur: self._core.delete_thread(cur, namespace, thread_id, self.clock()))

    async def aprune(self, thread_id: str, *, keep_last: int, namespace: str = "") -> int:
        if keep_last < 1:
            raise ValueError("prune(keep_last=...) must keep at least 1 checkpoint")
        check_thread(thread_id, namespace)
        result: int = await self._write(lambda cur: self._core.prune(cur, namespace, thread_id, keep_last))
        return result

    async def avacuum(self) -> None:
        """Give the space that deleted and pruned checkpoints leave in the file back to the file
        system: ``VACUUM`` rewrites the database without its free pages, then a truncating WAL
        checkpoint empties the log.

        Why a method of its own: SQLite keeps freed pages inside the file for later writes, so
        ``prune`` and ``delete_thread`` make room for new checkpoints but never make the file
        smaller. Rewriting it costs time and space proportional to what is kept (up to about
        twice the database while it runs), and it waits for the write lock like any commit, so
        it is left to whoever decides it is worth it: ``plait db prune`` calls it after pruning.
        Concurrent readers keep working; a reader holding an old snapshot may leave the log
        untruncated until the next checkpoint.
        """
        await self._submit(self._writer, _vacuum)

    def vacuum(self) -> None:
        """Sync :meth:`avacuum`."""
        run_sync(self.avacuum())

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        check_thread(thread_id, namespace)
        seconds = self.lease_ttl if ttl is None else ttl
        lease: Lease = await self._lease(
            lambda cur: self._core.take_lease(cur, namespace, thread_id, owner, seconds, self.clock())
        )
        return lease

    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        check_thread(lease.thread_id, lease.namespace)
        seconds = self.lease_ttl if ttl is None else ttl
        renewed: Lease = await self._lease(lambda cur: self._core.renew_lease(cur, lease, seconds, self.clock()))
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

        Reading the head here also tells this store where each of its values sits in its
        delta chain, so that the run's commits store what they append rather than whole
        values, even when another process wrote the head.
        """
        check_thread(thread_id, namespace, checkpoint_id)  # before the lease is taken
        lease = await self.atake_lease(thread_id, owner, namespace=namespace, ttl=ttl)
        result: Checkpoint | None = await read_or_release(
            self, lease, self._read(lambda cur: self._core.get(cur, namespace, thread_id, checkpoint_id, resume=True))
        )
        return lease, result

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        check_thread(lease.thread_id, lease.namespace)
        await self._lease(lambda cur: self._core.release_lease(cur, lease, status, self.clock()))

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


def _vacuum(conn: sqlite3.Connection) -> None:
    """VACUUM (which runs outside a transaction) and empty the WAL into the rewritten file."""
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def _has_file(path: str) -> bool:
    """Whether ``path`` names a database file (not SQLite's in-memory or temporary database)
    on a system with ``os.pwrite``."""
    return path not in ("", ":memory:") and hasattr(os, "pwrite")


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # cancelled by the caller; the work itself still completed or failed
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
