"""What every part of the SQL checkpoint store shares: the cursor and dialect it is written
against, the commit request, and the per-thread cache of the last checkpoint written.

The store itself is :class:`plait.checkpoint.sql._core.SqlCore`; its commit path is in
:mod:`plait.checkpoint.sql._commit` and its reads in :mod:`plait.checkpoint.sql._read`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from plait.checkpoint import delta
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Fence, WritesBatch
from plait.store.records import MemoryWrite

__all__ = ["BatchSql", "Chan", "CommitRequest", "Cursor", "Dialect", "Head", "HeadCache", "Key", "json_rows"]

_CACHE_THREADS = 4096
_CACHE_PASTS = 64
"""Past checkpoints remembered for writes on them (see :meth:`HeadCache.remember_past`)."""


class Cursor(Protocol):
    """The part of a DB-API cursor the core uses (sqlite3 and psycopg both fit)."""

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: Any, params: Any, /) -> Any: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSql:
    """What differs between engines in a sweep's statements over a batch of threads."""

    rows: Callable[[int], str]
    """A SELECT yielding rows of ``n`` text columns from one parameter, a JSON list of
    ``n``-lists (made by :func:`json_rows`): JSON rather than arrays, because psycopg dumps
    a list item by item (3.7 of a 6 s sweep), and SQLite has no arrays."""
    hex_bytes: str = ""
    """A SQL expression of one parameter turning hex text into bytes (PostgreSQL:
    ``decode(?, 'hex')``), with which a sweep stores a batch's moved blobs by one statement;
    empty: a statement per blob (SQLite, whose ``unhex`` is too recent to count on, and
    where a statement is no round trip)."""
    delete_by_what_stays: bool = False
    """How a sweep deletes a batch's rows: naming the batch's threads and what stays
    (PostgreSQL: a range scan per thread, 3 to 5 times faster than looking each going row
    up), or naming every row that goes (SQLite, which scans a ``NOT IN`` list per row)."""
    rebuild: bool = False
    """Whether a sweep that drops most of the blobs table empties it and writes back what
    stays, in one transaction for the whole sweep (SQLite, where deleting rows one by one
    costs four times as much; PostgreSQL deletes in batches and leaves the rest to vacuum)."""
    listing_setup: str = ""
    """A statement run first in a sweep's listing transaction (PostgreSQL: ``SET LOCAL jit =
    off``: on a store without statistics yet, a table filled faster than autoanalyze comes
    round, the planner estimates the listing of 10,000 threads at 200,000 rows and compiles
    it, 0.2 s of a 0.5 s listing); empty: the listing is a plain read."""
    lanes: int = 1
    """How many of a sweep's batch transactions run at once: PostgreSQL 2, so that the server
    deletes one batch's rows while the next batch is read and planned in Python (on separate
    connections: the batches' threads are disjoint, and so are their locks); SQLite 1 (one
    writer)."""


def json_rows(rows: Sequence[Sequence[str | None]]) -> str:
    """The parameter of :attr:`BatchSql.rows`."""
    return orjson.dumps(rows).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """What differs between SQL engines; everything else is shared."""

    prefix: str
    """Prepended to table names (``plait_``, or ``"schema".plait_``)."""
    placeholder: str
    """The parameter marker: ``?`` (sqlite3) or ``%s`` (psycopg)."""
    blob: str
    real: str
    serial_pk: str
    now: str
    """A SQL expression: the database's wall clock in unix seconds (older migrations)."""
    clock: str
    """A SQL expression of one parameter: the lease clock, unix seconds. SQLite: the
    parameter (the caller's clock); PostgreSQL: the parameter, or the server's clock when
    it is NULL (what machines sharing one database agree on)."""
    no_limit: Any
    """The ``LIMIT`` parameter that means no limit (SQLite: -1; PostgreSQL: NULL)."""
    keys: str
    """A SELECT yielding ``(channel, id)`` rows from the parameters :attr:`keys_params` makes."""
    keys_params: Callable[[Sequence[tuple[str, str]]], list[Any]]
    batch: BatchSql
    """How a sweep names a batch's rows in one statement (:mod:`plait.checkpoint.sql._sweep`)."""
    table_exists: str
    """A query returning a non-NULL first column when the table named by its parameter exists."""
    table_exists_param: Callable[[str], str]
    text_holds_nul: bool = True
    """False when text columns cannot store NUL (PostgreSQL): such ids are refused."""
    lateral: bool = False
    """Whether the recursive reads look rows up through LATERAL subqueries (see
    :func:`~plait.checkpoint.sql._schema.joins`)."""
    lazy_rows: bool = False
    """Whether a cursor steps through a query's rows as they are read (sqlite3), so that a
    read can stop a scan early, on a cursor of its own (``cursor.connection.cursor()``)."""
    small_table: str = ""
    """Appended to CREATE TABLE of tables with small rows (SQLite: `` WITHOUT ROWID``, which
    keeps such a table in one b-tree instead of a table and its primary-key index)."""
    migrations: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """Statements only this engine runs, after the shared ones of the same version."""
    jsonb: bool = False
    """Whether memory items are kept as ``jsonb`` and filtered with PostgreSQL's JSON
    operators; otherwise as JSON text, filtered with SQLite's JSON functions (see
    :mod:`plait.checkpoint.sql._memory_sql`)."""
    row_lock: str = ""
    """Appended to a SELECT of a thread's row that must hold the row until the transaction
    ends (PostgreSQL: `` FOR UPDATE``; SQLite's write transaction already excludes every
    other writer)."""
    server_checks: bool = False
    """Whether the store's own functions check fences (``{P}fence()``), a cached commit's
    parent (``{P}require_parent()``) and lease acquisitions (``{P}acquire_lease()``),
    raising server-side instead of returning answers to read here (PostgreSQL: a commit or
    a lease then reads no result at all, and goes in one round trip)."""

    def q(self, sql: str) -> str:
        """``sql`` with its ``?`` markers replaced by this engine's parameter marker."""
        return sql.replace("?", self.placeholder) if self.placeholder != "?" else sql


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRequest:
    """One ``commit()`` call: all of it is stored, or none of it."""

    checkpoints: Sequence[CheckpointWrite]
    writes: Sequence[WritesBatch]
    fence: Fence | None = None
    memory: Sequence[MemoryWrite] = ()
    """Memory writes, applied in order after the rest (and only when a fence lets the
    commit through)."""


@dataclass(slots=True)
class Chan:
    """A channel of a cached checkpoint: where its value is stored, and the value."""

    blob: str
    value: Any
    chain: delta.Chain | None
    """None when unknown (inherited after a cache miss): its next change is stored in full."""
    prefixes: dict[str, int] | None = None
    """A list's earlier values in this process's line of appends: blob id -> item count,
    each value the first items of :attr:`value` (a read of an older checkpoint slices them
    instead of replaying its chain). Shared by the heads of one line and only ever added
    to (an entry stays true of every later value of the line), up to ``PREFIXES_MAX``."""


PREFIXES_MAX = 1024
"""The most earlier values a list channel's line remembers (:attr:`Chan.prefixes`)."""


@dataclass(slots=True)
class Head:
    """The last checkpoint this process wrote on a thread, to compute the next one's deltas."""

    id: str
    chans: dict[str, Chan] = field(default_factory=dict)
    record: Checkpoint | None = None
    """The checkpoint itself, as committed, when it had no pending writes as far as this
    process knows (see :meth:`Checkpointer.known_head`); None otherwise."""


Key = tuple[str, str]
"""A thread: ``(namespace, thread_id)``."""


class HeadCache:
    """The last checkpoint written per thread, for the most recent threads, and a few past
    checkpoints read for a write on them; thread-safe."""

    def __init__(self) -> None:
        self._cache: OrderedDict[Key, Head] = OrderedDict()
        self._pasts: OrderedDict[tuple[str, str, str], Head] = OrderedDict()
        self._lock = threading.Lock()

    def remember_past(self, key: Key, cp: Checkpoint) -> None:
        """Remember ``cp``, just read for a write on it without pending writes, with the
        channels the read put in the cache as the thread's head (nothing when another head
        replaced it since): repeated updates of one past checkpoint (a branch edited again
        and again) then neither read it nor its parent's body. A checkpoint never changes
        once stored but for pending writes added to it and its deletion, which a commit
        built on it rules out by its fence (``Fence.expect_parent_no_writes``)."""
        with self._lock:
            head = self._cache.get(key)
            if head is None or head.id != cp.id or cp.pending_writes:
                return
            self._pasts[(*key, cp.id)] = Head(cp.id, head.chans, cp)
            self._pasts.move_to_end((*key, cp.id))
            while len(self._pasts) > _CACHE_PASTS:
                self._pasts.popitem(last=False)

    def past(self, key: Key, checkpoint_id: str) -> Head | None:
        """A past checkpoint remembered by :meth:`remember_past`."""
        with self._lock:
            return self._pasts.get((*key, checkpoint_id))

    def _drop_pasts(self, keys: set[Key]) -> None:
        for where in [w for w in self._pasts if w[:2] in keys]:
            del self._pasts[where]

    def get(self, key: Key) -> Head | None:
        with self._lock:
            return self._cache.get(key)

    def publish(self, staging: Mapping[Key, Head]) -> None:
        """Remember the heads a committed transaction wrote, evicting the oldest threads."""
        with self._lock:
            for key, head in staging.items():
                self._cache[key] = head
                self._cache.move_to_end(key)
            while len(self._cache) > _CACHE_THREADS:
                self._cache.popitem(last=False)

    def forget(self, key: Key) -> None:
        with self._lock:
            self._cache.pop(key, None)
            self._drop_pasts({key})

    def known(self, key: Key) -> Checkpoint | None:
        """The cached head's checkpoint record, if it has one (see :attr:`Head.record`)."""
        with self._lock:
            head = self._cache.get(key)
            return None if head is None else head.record

    def unknow(self, keys: Iterable[Key]) -> None:
        """Drop the records of ``keys``' heads (pending writes are being added to them),
        keeping what their deltas need; and their remembered past checkpoints."""
        with self._lock:
            keys = set(keys)
            self._drop_pasts(keys)
            for key in keys:
                head = self._cache.get(key)
                if head is not None and head.record is not None:
                    self._cache[key] = Head(head.id, head.chans)
