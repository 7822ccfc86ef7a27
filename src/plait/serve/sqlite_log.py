"""The run log in SQLite: in the checkpoints' own file on the embedded default, in a file of
its own beside a file store, in memory for the memory store.

One connection, used from one thread of its own, so that a statement never blocks the event
loop and SQLite's connection is never shared between threads. The tables are the server's
own (``plait_serve_*``); the checkpointer's are never touched. Writes are one transaction
each; in WAL mode with ``synchronous=NORMAL`` a committed event survives a crash of the
process (as the checkpoints written beside it do).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import orjson

from plait._sqlite_busy import is_busy, until_free
from plait._sync import settle
from plait.serve.log import LocalRunLog, thread_order, with_metadata
from plait.serve.records import ACTIVE, RunRecord, StoredEvent, ThreadRecord

__all__ = ["SqliteRunLog"]

T = TypeVar("T")
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[sqlite3.Connection], Any]]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS plait_serve_threads (
    thread_id TEXT PRIMARY KEY,
    metadata BLOB NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS plait_serve_runs (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    assistant_id TEXT NOT NULL,
    graph TEXT NOT NULL,
    status TEXT NOT NULL,
    metadata BLOB NOT NULL,
    kwargs BLOB NOT NULL,
    multitask TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    output BLOB,
    error BLOB,
    start_checkpoint TEXT,
    cancel TEXT,
    temporary INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS plait_serve_runs_thread ON plait_serve_runs (thread_id, n);
CREATE INDEX IF NOT EXISTS plait_serve_runs_status ON plait_serve_runs (status, n);
CREATE INDEX IF NOT EXISTS plait_serve_runs_active ON plait_serve_runs (thread_id, n)
    WHERE status IN ('pending', 'running');
CREATE TABLE IF NOT EXISTS plait_serve_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL,
    data BLOB NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""

_RUN_COLUMNS = (
    "run_id, thread_id, assistant_id, graph, status, metadata, kwargs, multitask, created_at, updated_at, "
    "attempts, output, error, start_checkpoint, cancel, temporary"
)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def _loads_or_none(data: bytes | None) -> Any:
    return None if data is None else orjson.loads(data)


class SqliteRunLog(LocalRunLog):
    """The run log in the SQLite database at ``path`` (``":memory:"`` for one in memory)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.using = threading.Lock()
        """Held by whoever uses the connection: the log's thread, or the loop's thread
        writing a streamed answer's first chunk itself (:meth:`append_events_now`)."""
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        """The log's thread, started by the first job: a queue and a hop back by
        ``call_soon_threadsafe``, which cost a third of an executor's hop in CPU (a run makes
        six or seven)."""
        self.closed = False

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """``fn`` handed to the log's thread before this returns; its result when awaited."""
        if self.closed:
            raise RuntimeError(f"the run log of {self.path!r} is closed")
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="plait-serve-log", daemon=True)
            self.thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.jobs.put((loop, future, fn))
        return future

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            loop, future, fn = job
            try:
                with self.using:
                    if self.conn is None:
                        self.conn = _connect(self.path)
                    job_on = partial(fn, self.conn)
                    result = until_free(job_on, patience=_BUSY_MS / 1000, pause=0.00005, most=0.001)
                    error = None
            except BaseException as exc:
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, future, result, error)

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.submit(fn)

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in one write transaction (BEGIN IMMEDIATE: no upgrade deadlock with the
        checkpointer's writers on the same file)."""
        return await self.submit(partial(_transaction, fn))

    async def open(self) -> None:
        await self.call(lambda conn: conn.executescript(_SCHEMA))

    async def close(self) -> None:
        def shut(conn: sqlite3.Connection) -> None:
            conn.close()
            self.conn = None

        if self.conn is not None:
            await self.call(shut)
        self.closed = True
        if self.thread is not None:
            self.jobs.put(None)
            await asyncio.to_thread(self.thread.join)
            self.thread = None

    # -- threads ---------------------------------------------------------------------------

    async def put_thread(self, record: ThreadRecord) -> tuple[ThreadRecord, bool]:
        def put(conn: sqlite3.Connection) -> tuple[ThreadRecord, bool]:
            cur = conn.execute(
                "INSERT OR IGNORE INTO plait_serve_threads VALUES (?, ?, ?, ?)",
                (record.thread_id, _dumps(record.metadata), record.created_at, record.updated_at),
            )
            if cur.rowcount:
                return record, True
            found = _thread(conn, record.thread_id)
            assert found is not None
            return found, False

        return await self.write(put)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        return await self.call(lambda conn: _thread(conn, thread_id))

    async def update_thread(self, thread_id: str, metadata: Mapping[str, Any], now: float) -> ThreadRecord | None:
        return await self.write(lambda conn: _merge_metadata(conn, thread_id, metadata, now))

    async def touch_thread(self, thread_id: str, now: float) -> None:
        await self.write(
            lambda conn: conn.execute(
                "UPDATE plait_serve_threads SET updated_at = ? WHERE thread_id = ?", (now, thread_id)
            )
        )

    async def delete_thread(self, thread_id: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            conn.execute(
                "DELETE FROM plait_serve_events WHERE run_id IN "
                "(SELECT run_id FROM plait_serve_runs WHERE thread_id = ?)",
                (thread_id,),
            )
            conn.execute("DELETE FROM plait_serve_runs WHERE thread_id = ?", (thread_id,))
            return conn.execute("DELETE FROM plait_serve_threads WHERE thread_id = ?", (thread_id,)).rowcount > 0

        return await self.write(delete)

    async def search_threads(
        self, *, metadata: Mapping[str, Any] | None, ids: Sequence[str] | None, sort_by: str, descending: bool
    ) -> list[ThreadRecord]:
        sql = "SELECT thread_id, metadata, created_at, updated_at FROM plait_serve_threads"
        params: list[Any] = []
        if ids is not None:
            sql += f" WHERE thread_id IN ({', '.join('?' for _ in ids)})" if ids else " WHERE 0"
            params.extend(ids)
        sql += thread_order(sort_by, descending)

        def search(conn: sqlite3.Connection) -> list[ThreadRecord]:
            rows = [_thread_of(row) for row in conn.execute(sql, params)]
            return with_metadata(rows, metadata)

        return await self.call(search)

    # -- runs ------------------------------------------------------------------------------

    async def insert_run(
        self, record: RunRecord, *, tags: Mapping[str, Any] | None = None, reject: bool = False
    ) -> list[RunRecord]:
        def insert(conn: sqlite3.Connection) -> list[RunRecord]:
            active = _active(conn, record.thread_id)
            if active and reject:
                return active
            conn.execute(
                f"INSERT INTO plait_serve_runs ({_RUN_COLUMNS}) VALUES ({', '.join('?' * 16)})", _run_row(record)
            )
            if tags:
                _merge_metadata(conn, record.thread_id, tags, record.created_at)
            return active

        return await self.write(insert)

    async def get_run(self, run_id: str) -> RunRecord | None:
        def get(conn: sqlite3.Connection) -> RunRecord | None:
            row = conn.execute(f"SELECT {_RUN_COLUMNS} FROM plait_serve_runs WHERE run_id = ?", (run_id,)).fetchone()
            return None if row is None else _run_of(row)

        return await self.call(get)

    async def active_runs(self, thread_id: str) -> list[RunRecord]:
        return await self.call(lambda conn: _active(conn, thread_id))

    async def runs_of(self, thread_id: str, *, status: str | None = None) -> list[RunRecord]:
        sql = f"SELECT {_RUN_COLUMNS} FROM plait_serve_runs WHERE thread_id = ?"
        params: list[Any] = [thread_id]
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        sql += " ORDER BY n"
        return await self.call(lambda conn: [_run_of(row) for row in conn.execute(sql, params)])

    async def unfinished_runs(self) -> list[RunRecord]:
        sql = f"SELECT {_RUN_COLUMNS} FROM plait_serve_runs WHERE status IN ({', '.join('?' * len(ACTIVE))}) ORDER BY n"
        return await self.call(lambda conn: [_run_of(row) for row in conn.execute(sql, ACTIVE)])

    async def save_run(self, record: RunRecord, events: Sequence[tuple[str, bytes]] = ()) -> int:
        row = _run_row(record)

        def save(conn: sqlite3.Connection) -> int:
            conn.execute(f"UPDATE plait_serve_runs SET {_RUN_SETS} WHERE run_id = ?", (*row[1:], row[0]))
            if record.done:  # its thread moved: in the same transaction
                conn.execute(
                    "UPDATE plait_serve_threads SET updated_at = ? WHERE thread_id = ?",
                    (record.updated_at, record.thread_id),
                )
            return _append(conn, record.run_id, events, record.updated_at) if events else 0

        return await self.write(save)

    async def delete_run(self, run_id: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM plait_serve_events WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM plait_serve_runs WHERE run_id = ?", (run_id,))

        await self.write(delete)

    # -- events ----------------------------------------------------------------------------

    async def append_events(self, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int:
        return await self.write(lambda conn: _append(conn, run_id, events, now))

    def append_events_now(self, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int | Awaitable[int]:
        """Stored on the calling thread (the event loop's) when the log's connection and the
        file's write lock are both free, in a fraction of a millisecond (no fsync); else by
        the log's thread. Handed to the thread, the chunk would wait for that thread to win
        the interpreter's lock from the loop, and the step commit queued right after it
        took the file first."""
        if self.conn is not None and self.using.acquire(blocking=False):
            try:
                last = _try_append(self.conn, run_id, events, now)
            finally:
                self.using.release()
            if last is not None:
                return last
        return self.submit(partial(_transaction, lambda conn: _append(conn, run_id, events, now)))

    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        def read(conn: sqlite3.Connection) -> list[StoredEvent]:
            rows = conn.execute(
                "SELECT seq, event, data FROM plait_serve_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after, limit),
            )
            return [StoredEvent(seq, event, bytes(data)) for seq, event, data in rows]

        return await self.call(read)

    async def last_event(self, run_id: str) -> int:
        def last(conn: sqlite3.Connection) -> int:
            (seq,) = conn.execute(
                "SELECT coalesce(max(seq), 0) FROM plait_serve_events WHERE run_id = ?", (run_id,)
            ).fetchone()
            return int(seq)

        return await self.call(last)

    async def drop_events(self, ended_before: float) -> int:
        def drop(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM plait_serve_events WHERE run_id IN (SELECT run_id FROM plait_serve_runs "
                f"WHERE status NOT IN ({', '.join('?' * len(ACTIVE))}) AND updated_at < ?)",
                (*ACTIVE, ended_before),
            ).rowcount

        return await self.write(drop)


_BUSY_MS = 10_000


_RUN_SETS = ", ".join(f"{c.strip()} = ?" for c in _RUN_COLUMNS.split(",")[1:])
_ACTIVE_SQL = (
    f"SELECT {_RUN_COLUMNS} FROM plait_serve_runs WHERE thread_id = ? "
    f"AND status IN ({', '.join(repr(s) for s in ACTIVE)}) ORDER BY n"
)
"""The statuses written out, not bound: SQLite uses the partial index ``plait_serve_runs_active``
only when the query's WHERE implies the index's, which a bound parameter never does (it would
walk every run the thread ever had)."""


def _active(conn: sqlite3.Connection, thread_id: str) -> list[RunRecord]:
    return [_run_of(row) for row in conn.execute(_ACTIVE_SQL, (thread_id,))]


def _connect(path: str) -> sqlite3.Connection:
    """The log's connection. It never waits inside SQLite (busy timeout 0): a job refused
    because another connection holds the file is run again, polling every fraction of a
    millisecond (:func:`~plait._sqlite_busy.until_free`). The checkpoints' writer shares the
    file, and a run's events are stored while its steps are committed: SQLite's own wait
    sleeps 1, 2, 5, 10 ms and more between tries, which a stream's first event would pay
    after every step's commit; and setting the timeout around each transaction instead cost
    two statements each."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
    if path != ":memory:":
        until_free(lambda: conn.execute("PRAGMA journal_mode = WAL"), patience=_BUSY_MS / 1000, pause=0.001, most=0.05)
        conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _transaction(fn: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
    """``fn`` in one write transaction (BEGIN IMMEDIATE: no upgrade deadlock with the
    checkpoints' writer); SQLITE_BUSY at the BEGIN, before anything is written, is retried
    by the log's thread."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return out


def _try_append(conn: sqlite3.Connection, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int | None:
    """:func:`_append` in its own transaction if the file's write lock is free now; None if
    another connection holds it (nothing written). Run on the event loop's thread, so it
    never waits: no busy wait, and no WAL checkpoint at its commit (a checkpoint copies pages
    and syncs the file; the log's thread and the checkpointer's writer run them)."""
    try:
        conn.execute("BEGIN IMMEDIATE")  # (the log's connection never waits: see _connect)
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            return None
        raise
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    try:
        last = _append(conn, run_id, events, now)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.execute(f"PRAGMA wal_autocheckpoint = {_AUTOCHECKPOINT}")
    return last


_AUTOCHECKPOINT = 1000
"""SQLite's default WAL checkpoint threshold (pages), which the log's connection keeps."""


def _append(conn: sqlite3.Connection, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int:
    (last,) = conn.execute(
        "SELECT coalesce(max(seq), 0) FROM plait_serve_events WHERE run_id = ?", (run_id,)
    ).fetchone()
    conn.executemany(
        "INSERT INTO plait_serve_events VALUES (?, ?, ?, ?, ?)",
        [(run_id, last + i, name, data, now) for i, (name, data) in enumerate(events, 1)],
    )
    return int(last) + len(events)


def _merge_metadata(
    conn: sqlite3.Connection, thread_id: str, metadata: Mapping[str, Any], now: float
) -> ThreadRecord | None:
    found = _thread(conn, thread_id)
    if found is None:
        return None
    merged = {**found.metadata, **metadata}
    conn.execute(
        "UPDATE plait_serve_threads SET metadata = ?, updated_at = ? WHERE thread_id = ?",
        (_dumps(merged), now, thread_id),
    )
    return ThreadRecord(thread_id=thread_id, metadata=merged, created_at=found.created_at, updated_at=now)


def _thread(conn: sqlite3.Connection, thread_id: str) -> ThreadRecord | None:
    row = conn.execute(
        "SELECT thread_id, metadata, created_at, updated_at FROM plait_serve_threads WHERE thread_id = ?",
        (thread_id,),
    ).fetchone()
    return None if row is None else _thread_of(row)


def _thread_of(row: Sequence[Any]) -> ThreadRecord:
    return ThreadRecord(thread_id=row[0], metadata=orjson.loads(row[1]), created_at=row[2], updated_at=row[3])


def _run_row(r: RunRecord) -> tuple[Any, ...]:
    return (
        r.run_id, r.thread_id, r.assistant_id, r.graph, r.status, _dumps(r.metadata), _dumps(r.kwargs), r.multitask,
        r.created_at, r.updated_at, r.attempts, None if r.output is None else _dumps(r.output),
        None if r.error is None else _dumps(r.error), r.start_checkpoint, r.cancel, int(r.temporary),
    )  # fmt: skip


def _run_of(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0], thread_id=row[1], assistant_id=row[2], graph=row[3], status=row[4],
        metadata=orjson.loads(row[5]), kwargs=orjson.loads(row[6]), multitask=row[7], created_at=row[8],
        updated_at=row[9], attempts=row[10], output=_loads_or_none(row[11]), error=_loads_or_none(row[12]),
        start_checkpoint=row[13], cancel=row[14], temporary=bool(row[15]),
    )  # fmt: skip
