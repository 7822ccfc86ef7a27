"""The SQLite store's threads: each owns one connection and runs jobs from a queue, in
order; a job is a function of the connection. Queued jobs of one kind (the store's commits)
are folded into one call of the worker's ``fold`` function, which stores them in one
transaction (group commit). A job may instead run on the caller's thread when nobody else is
waiting (see :meth:`Worker.inline`).

The worker knows nothing of what its jobs do: the store gives it functions of a connection,
and the fold that stores several commits at once."""

from __future__ import annotations

import errno
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from plait._sqlite_busy import is_busy
from plait.checkpoint.sql._base import Cursor
from plait.errors import CheckpointError

__all__ = ["Fold", "Job", "Worker", "failure", "lease_transaction", "snapshot", "transaction"]

T = TypeVar("T")

_MAX_GROUP = 256
_STOP: Any = object()


Fold = Callable[[sqlite3.Connection, list[Any]], Sequence[BaseException | None]]
"""Runs several jobs' items at once on the connection (the store's commits, in one
transaction); returns per item None when it is done, else the exception that refused it."""


@dataclass(slots=True)
class Job:
    fn: Callable[[sqlite3.Connection], Any] | None
    """What the job runs on the connection; None: ``item`` goes to the worker's fold."""
    item: Any
    done: Callable[[Any, BaseException | None], None]


class Worker:
    """A thread that owns one connection and runs jobs from a queue, in order.

    A job may also run on the caller's thread (:meth:`inline`) when the worker is idle: a
    round trip to the worker and back costs two thread wake-ups (on a small virtual machine
    as much as an fsync), which a lone caller waiting for the result gains
    nothing from. The connection's lock keeps the two paths from ever using it at once.
    """

    def __init__(
        self,
        name: str,
        opener: Callable[[], sqlite3.Connection],
        store: str,
        busy_ms: int,
        *,
        fold: Fold | None = None,
        closer: Callable[[], None] | None = None,
    ) -> None:
        self._opener = opener
        self._fold = fold
        """Runs the items of queued jobs without a function of their own, up to
        ``_MAX_GROUP`` at a time (group commit)."""
        self._closer = closer
        """Runs once the connection is closed, when the worker stops."""
        self._busy_ms = busy_ms
        self._waits = True
        """Whether the connection's busy timeout is ``busy_ms`` (the worker's) or 0 (inline)."""
        self._store = store
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._conn: sqlite3.Connection | None = None
        self._broken: BaseException | None = None
        self._lock = threading.Lock()
        """Held while the connection is in use, by the worker or by an inline caller."""
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Job) -> None:
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
            if is_busy(exc):
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
            if job.fn is not None:
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
                if nxt is _STOP or nxt.fn is not None:
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

    def _run_one(self, job: Job) -> None:
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

    def _run_group(self, group: list[Job]) -> None:
        if self._broken is not None or self._conn is None:
            for job in group:
                job.done(None, None if self._broken is None else self._translate(self._broken))
            return
        assert self._fold is not None
        results = self._fold(self._conn, [job.item for job in group])
        for job, error in zip(group, results, strict=True):
            job.done(None, None if error is None else self._translate(error))

    def _translate(self, exc: BaseException) -> BaseException:
        """The store's error for what SQLite (or the file system under it) raised."""
        if isinstance(exc, sqlite3.Error | OSError):
            err = CheckpointError(failure(self._store, exc))
            err.__cause__ = exc
            return err
        return exc


def failure(store: str, exc: sqlite3.Error | OSError) -> str:
    """What went wrong, said for a person: a full disk with what to do about it."""
    code = getattr(exc, "sqlite_errorcode", None)
    if (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or getattr(exc, "errno", None) in _DISK_FULL:
        return (
            f"{store}: the disk is full ({exc}), so the transaction was rolled back and nothing of it was "
            "stored; every checkpoint committed before stays readable. Free some space on that disk, then retry."
        )
    return f"{store}: {type(exc).__name__}: {exc}"


_DISK_FULL = frozenset((errno.ENOSPC, errno.EDQUOT))


def transaction(conn: sqlite3.Connection, fn: Callable[[Cursor], T], prepare: Callable[[], None] | None = None) -> T:
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


def lease_transaction(conn: sqlite3.Connection, fn: Callable[[Cursor], T]) -> T:
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
        return transaction(conn, fn)
    finally:
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


BULK_CACHE_KIB = 65_536
"""The page cache (KiB) a bulk transaction runs with: a sweep's batch frees thousands of
pages, and with SQLite's default 2 MB it spills dirty pages to the log mid-transaction."""

BULK_MMAP_BYTES = 1 << 32
"""How much of the file a bulk transaction reads through a memory map (SQLite caps it at its
build's limit, 2 GB by default): emptying a table visits every page of it, and reading the
300,000 pages a sweep of 10,000 threads x 50 steps frees by a ``read`` call each took twice
as long as the whole emptying does through the map (1.0 s against 0.5 s)."""


def bulk_transaction(
    conn: sqlite3.Connection, fn: Callable[[Cursor], T], prepare: Callable[[], None] | None = None
) -> T:
    """Run a write transaction that deletes much (a sweep's batch) with a larger page cache,
    the file read through a memory map and ``secure_delete = FAST``, then restore the
    connection's settings.

    Why FAST: Debian's and Ubuntu's SQLite are built with secure delete on, which writes
    every freed page back zeroed: a sweep that drops 98 % of a file then writes the whole file
    to the log and copies it home again. FAST still zeroes deleted rows inside pages that
    stay; the freed pages themselves are cut off the file by the space reclaim that follows
    a sweep (:func:`plait.checkpoint.sqlite._store._reclaim`), or reused by later writes.
    """
    ((secure,),) = conn.execute("PRAGMA secure_delete").fetchall()
    ((cache,),) = conn.execute("PRAGMA cache_size").fetchall()
    ((mapped,),) = conn.execute("PRAGMA mmap_size").fetchall()
    conn.execute("PRAGMA secure_delete = FAST")
    conn.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")
    conn.execute(f"PRAGMA mmap_size = {BULK_MMAP_BYTES}").fetchall()
    try:
        return transaction(conn, fn, prepare)
    finally:
        conn.execute(f"PRAGMA mmap_size = {int(mapped)}").fetchall()
        conn.execute(f"PRAGMA cache_size = {int(cache)}")
        conn.execute(f"PRAGMA secure_delete = {int(secure)}")


def snapshot(conn: sqlite3.Connection, fn: Callable[[Cursor], T]) -> T:
    """Run reads in one transaction, so they see a single committed state."""
    conn.execute("BEGIN")
    try:
        return fn(conn.cursor())
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
