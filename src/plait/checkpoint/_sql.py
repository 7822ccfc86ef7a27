"""The SQL checkpoint store, written once for SQLite and PostgreSQL.

Everything a SQL backend does (schema and migrations, commit, reads, housekeeping, leases)
lives here as plain DB-API calls on a cursor; a dialect (:class:`Dialect`) supplies only the
few fragments that differ (column types, the parameter marker, the database clock, how a
list of keys is passed, how a table's existence is checked). The dialect modules own
connections, threads and transactions, and call into :class:`SqlCore` inside them.

The tables and every statement are in :mod:`plait.checkpoint._sql_schema`.

Every statement is idempotent (upserts), so a commit whose outcome is unknown (the
connection dropped during COMMIT) can be retried safely.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from plait._frozen import FrozenDict
from plait.checkpoint import delta
from plait.checkpoint._common import check_filter, keep_set, matches
from plait.checkpoint._records import Body, RecordError, decode_body, decode_json, encode_body, encode_json
from plait.checkpoint._sql_schema import MIGRATIONS, SCHEMA_VERSION, STATEMENTS, joins
from plait.checkpoint.base import (
    Checkpoint,
    CheckpointWrite,
    Fence,
    PendingWrite,
    ThreadInfo,
    WritesBatch,
    fence_targets,
)
from plait.errors import (
    CheckpointCorruptError,
    CheckpointError,
    ConcurrentUpdateError,
    StoreVersionError,
    ThreadBusyError,
)

__all__ = ["SCHEMA_VERSION", "CommitRequest", "Cursor", "Dialect", "SqlCore"]

_CACHE_THREADS = 4096
_NO_LIMIT = 2**62


class Cursor(Protocol):
    """The part of a DB-API cursor the core uses (sqlite3 and psycopg both fit)."""

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: Any, params: Any, /) -> Any: ...


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
    """A SQL expression: the database's wall clock in unix seconds."""
    keys: str
    """A SELECT yielding ``(channel, id)`` rows from the parameters :attr:`keys_params` makes."""
    keys_params: Callable[[Sequence[tuple[str, str]]], list[Any]]
    table_exists: str
    """A query returning a non-NULL first column when the table named by its parameter exists."""
    table_exists_param: Callable[[str], str]
    text_holds_nul: bool = True
    """False when text columns cannot store NUL (PostgreSQL): such ids are refused."""
    lateral: bool = False
    """Whether the recursive reads look rows up through LATERAL subqueries (see
    :func:`~plait.checkpoint._sql_schema.joins`)."""
    small_table: str = ""
    """Appended to CREATE TABLE of tables with small rows (SQLite: `` WITHOUT ROWID``, which
    keeps such a table in one b-tree instead of a table and its primary-key index)."""
    migrations: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """Statements only this engine runs, after the shared ones of the same version."""
    server_fence: bool = False
    """Whether a fence is checked by the ``{P}fence()`` function, which raises server-side
    (PostgreSQL: no result to wait for in a pipeline), instead of by SELECTs read here."""
    thread_lock: str = ""
    """A statement locking one thread (``ns``, ``thread_id``) until the transaction ends,
    run before a lease is taken (see ``PG_THREAD_LOCK``); empty when write transactions
    are serialized anyway (SQLite)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRequest:
    """One ``commit()`` call: all of it is stored, or none of it."""

    checkpoints: Sequence[CheckpointWrite]
    writes: Sequence[WritesBatch]
    fence: Fence | None = None


@dataclass(slots=True)
class _Chan:
    """A channel of a cached checkpoint: where its value is stored, and the value."""

    blob: str
    value: Any
    chain: delta.Chain | None
    """None when unknown (inherited after a cache miss): its next change is stored in full."""


@dataclass(slots=True)
class _Head:
    """The last checkpoint this process wrote on a thread, to compute the next one's deltas."""

    id: str
    chans: dict[str, _Chan] = field(default_factory=dict)


_Key = tuple[str, str]


class _StaleCache(Exception):
    """Internal: the cached parent of a commit is gone from the database (see ``ins_cp_checked``)."""

    def __init__(self, key: _Key) -> None:
        super().__init__(key)
        self.key = key


class SqlCore:
    """Shared SQL logic over a cursor, plus the per-thread cache of the last checkpoint written."""

    def __init__(self, dialect: Dialect, store: str) -> None:
        self.dialect = dialect
        self.store = store
        """A name for messages: ``SQLite database 'x.db'``."""
        fmt = {
            "P": dialect.prefix,
            "blob": dialect.blob,
            "real": dialect.real,
            "serial_pk": dialect.serial_pk,
            "small_table": dialect.small_table,
        }
        fmt |= {"now": dialect.now, "keys": dialect.keys, "where": "{where}", "start": "{start}"}
        fmt |= {k: v.replace("{P}", dialect.prefix) for k, v in joins(lateral=dialect.lateral).items()}
        self._sql = {k: self._q(v.format(**fmt)) for k, v in STATEMENTS.items()}
        self._migrations = {
            v: tuple(self._q(s.format(**fmt)) for s in (*MIGRATIONS.get(v, ()), *dialect.migrations.get(v, ())))
            for v in {*MIGRATIONS, *dialect.migrations}
        }
        self._thread_lock = self._q(dialect.thread_lock)
        self._cache: OrderedDict[_Key, _Head] = OrderedDict()
        self._lock = threading.Lock()

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.dialect.placeholder) if self.dialect.placeholder != "?" else sql

    # -- schema ------------------------------------------------------------------------------

    def version(self, cur: Cursor) -> int:
        """The store's schema version; 0 when it has never been set up."""
        table = self.dialect.table_exists_param(self.dialect.prefix + "migrations")
        if cur.execute(self._q(self.dialect.table_exists), (table,)).fetchone()[0] is None:
            return 0
        found = cur.execute(self._sql["version"]).fetchone()[0]
        return int(found or 0)

    def check_version(self, cur: Cursor) -> None:
        """Refuse a store this code does not understand, saying what to do.

        Raises:
            StoreVersionError: the store is newer than this code, or not (fully) set up.
        """
        found = self.version(cur)
        if found != SCHEMA_VERSION:
            raise StoreVersionError(self.store, found, SCHEMA_VERSION)

    def migrate(self, cur: Cursor) -> int:
        """Bring the store to :data:`SCHEMA_VERSION` inside the caller's transaction.

        Returns:
            The version found before migrating.

        Raises:
            StoreVersionError: the store was written by a newer plait.
        """
        cur.execute(self._sql["mig_table"])
        found = self.version(cur)
        if found > SCHEMA_VERSION:
            raise StoreVersionError(self.store, found, SCHEMA_VERSION)
        for version in sorted(self._migrations):
            if version > found:
                for statement in self._migrations[version]:
                    cur.execute(statement)
                cur.execute(self._sql["mig_done"], (version, time.time()))
        return found

    # -- commit ------------------------------------------------------------------------------

    def commit_all(
        self, transaction: Callable[[Callable[[Cursor], Any]], Any], requests: Sequence[CommitRequest]
    ) -> list[Exception | None]:
        """Store several commits in one transaction (group commit).

        ``transaction(fn)`` must run ``fn(cursor)`` in a transaction, commit it and return
        what ``fn`` returned, or roll back and raise; it may call ``fn`` again to retry. When
        the group fails, each commit is retried alone, so one bad commit does not sink the
        others; each stays all-or-nothing.

        A commit whose fence refuses it (checked by SELECTs, before it writes anything) is
        skipped inside the group and fails alone, without sinking or redoing the others;
        a fence checked server-side aborts the transaction, and the retry one by one then
        refuses the same commit again (its check reads the same rows).

        Returns:
            Per request: None when it is durable, else the exception that refused it.
        """

        def run(
            batch: Sequence[CommitRequest], use_cache: bool
        ) -> Callable[[Cursor], tuple[dict[_Key, _Head], list[Exception | None]]]:
            def apply_all(cur: Cursor) -> tuple[dict[_Key, _Head], list[Exception | None]]:
                staging: dict[_Key, _Head] = {}  # fresh on every attempt
                refused: list[Exception | None] = []
                for request in batch:
                    refused.append(self._apply(cur, request, staging, use_cache))
                return staging, refused

            return apply_all

        def store(batch: Sequence[CommitRequest]) -> list[Exception | None]:
            try:
                staging, refused = transaction(run(batch, True))
            except _StaleCache as stale:
                # Another process deleted a parent this process had cached: forget it and
                # store the batch again from what the database holds (rolled back, so safe).
                self.forget(*stale.key)
                staging, refused = transaction(run(batch, False))
            self._publish(staging)
            return cast(list[Exception | None], refused)

        try:
            return store(requests)
        except Exception as exc:
            if len(requests) == 1:
                return [exc]
        results: list[Exception | None] = []
        for request in requests:
            try:
                (refused,) = store([request])
            except Exception as exc:
                results.append(exc)
            else:
                results.append(refused)
        return results

    def check_request(self, request: CommitRequest) -> None:
        """Refuse, before anything is written, text this store cannot hold.

        Channel names are passed to the blob query as JSON, where SQLite truncates a string
        at NUL, so a NUL in a channel name is refused everywhere; when text columns cannot
        hold NUL at all (PostgreSQL), ids, namespaces and write keys with NUL are refused too.

        Raises:
            CheckpointError: naming the offending text.
            ValueError: a fence expects a head but the commit stores no checkpoint.
        """
        if request.fence is not None:
            fence_targets(request.checkpoints, request.writes, request.fence)  # a misuse fails alone, early
        texts: list[tuple[str, str | None]] = []
        for cw in request.checkpoints:
            cp = cw.checkpoint
            texts.extend(("channel name", ch) for ch in cp.values)
            if not self.dialect.text_holds_nul:
                texts += [
                    ("thread id", cp.thread_id),
                    ("namespace", cp.namespace),
                    ("checkpoint id", cp.id),
                    ("parent id", cp.parent_id),
                ]
        if not self.dialect.text_holds_nul:
            for batch in request.writes:
                texts += [
                    ("thread id", batch.thread_id),
                    ("namespace", batch.namespace),
                    ("checkpoint id", batch.checkpoint_id),
                ]
                texts.extend(("pending write key", t) for w in batch.writes for t in (w.task_id, w.kind, w.key))
        self.check_text(texts)

    def check_text(self, texts: Iterable[tuple[str, str | None]]) -> None:
        """Raise CheckpointError for the first text holding a NUL (see :meth:`check_request`)."""
        for what, text in texts:
            if text is not None and "\x00" in text:
                raise CheckpointError(
                    f"{self.store} cannot store a {what} containing a NUL character ({text[:60]!r}); "
                    "use ids, names and keys without NUL"
                )

    def forget(self, namespace: str, thread_id: str) -> None:
        """Drop the cached head of a thread (after delete or prune)."""
        with self._lock:
            self._cache.pop((namespace, thread_id), None)

    def _publish(self, staging: Mapping[_Key, _Head]) -> None:
        with self._lock:
            for key, head in staging.items():
                self._cache[key] = head
                self._cache.move_to_end(key)
            while len(self._cache) > _CACHE_THREADS:
                self._cache.popitem(last=False)

    def _check_fence(self, cur: Cursor, request: CommitRequest, fence: Fence) -> None:
        """Check ``fence`` in the commit's transaction, before it writes anything.

        With a server-side fence (PostgreSQL) each thread's check is one statement whose
        answer is never read: a refusal raises in the database, aborts the transaction and
        comes back as the commit's error (mapped to plait's errors by the dialect module).
        Otherwise the lease and head are read here, on the database clock as leases are
        taken, inside the write transaction that holds the lock (SQLite: BEGIN IMMEDIATE).

        Raises:
            ThreadBusyError: another owner holds an unexpired lease on a thread it touches.
            ConcurrentUpdateError: the head is not the one the fence expects.
        """
        sql = self._sql
        threads, head = fence_targets(request.checkpoints, request.writes, fence)
        if self.dialect.server_fence:
            for ns, tid in threads:
                if head is not None and (ns, tid) == (head.namespace, head.thread_id):
                    cur.execute(sql["fence"], (ns, tid, fence.owner, True, head.expected, head.own))
                else:
                    cur.execute(sql["fence"], (ns, tid, fence.owner, False, None, None))
            return
        for ns, tid in threads:
            held = cur.execute(sql["lease_holder"], (ns, tid)).fetchone()
            if held is not None and held[0] != fence.owner and float(held[1]) > 0:
                raise ThreadBusyError(tid, held[0], float(held[1]))
        if head is not None:
            found = cur.execute(sql["head_id"], (head.namespace, head.thread_id)).fetchone()
            found_id = None if found is None else found[0]
            if not head.holds(found_id):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found_id)

    def _apply(
        self, cur: Cursor, request: CommitRequest, staging: dict[_Key, _Head], use_cache: bool
    ) -> Exception | None:
        """Write one commit in the caller's transaction; return the error of a fence that
        refused it (nothing of it written), None when it is written."""
        sql = self._sql
        if request.fence is not None:
            try:
                self._check_fence(cur, request, request.fence)
            except (ThreadBusyError, ConcurrentUpdateError) as refused:
                return refused
        for batch in request.writes:
            if batch.writes:
                ns, tid, cid = batch.namespace, batch.thread_id, batch.checkpoint_id
                rows = [(ns, tid, cid, w.task_id, w.kind, w.key, encode_json(w.value)) for w in batch.writes]
                cur.executemany(sql["ins_write"], rows)
        for cw in request.checkpoints:
            cp = cw.checkpoint
            ns, tid, parent_id = cp.namespace, cp.thread_id, cp.parent_id
            key = (ns, tid)
            staged = staging.get(key)
            cached = staged if staged is not None else self._cached(key) if use_cache else None
            hit = parent_id is not None and cached is not None and cached.id == parent_id
            # A head staged in this transaction was written by it; one from the cache may be stale.
            check = hit and staged is None
            base = cached.chans if hit and cached is not None else self._base_from_body(cur, cp)
            chans: dict[str, _Chan] = {}
            blobs: list[tuple[str, str, str, str, str | None, bytes]] = []
            changed = cw.changed
            for ch, value in cp.values.items():
                prev = base.get(ch)
                if prev is not None and ch not in changed:
                    chans[ch] = _Chan(prev.blob, value, prev.chain)
                    continue
                if prev is not None and prev.chain is not None:
                    data, is_delta, chain = delta.encode(value, prev.value, prev.chain)
                else:
                    data, is_delta, chain = delta.encode(value)
                blobs.append((ns, tid, ch, cp.id, prev.blob if is_delta and prev is not None else None, data))
                chans[ch] = _Chan(cp.id, value, chain)
            if blobs:
                cur.executemany(sql["ins_blob"], blobs)
            if cw.folds_parent_writes and parent_id is not None:
                cur.execute(sql["del_writes_of"], (ns, tid, parent_id))
            body = encode_body(cp, blobs={ch: c.blob for ch, c in chans.items()})
            source = cp.metadata.get("source", "")
            source = (source if type(source) is str else str(source)).replace("\x00", "\ufffd")  # text refuses NUL
            params = (ns, tid, cp.id, parent_id, cp.step, cp.created_at, source, encode_json(cp.metadata), body)
            # The checkpoint row goes last, so that in a Postgres pipeline the check's answer is
            # the only result waited for before COMMIT.
            if check:
                found = cur.execute(sql["ins_cp_checked"], (*params, ns, tid, parent_id)).fetchall()
                if not found or found[0][0] is None:
                    raise _StaleCache(key)
            else:
                cur.execute(sql["ins_cp"], params)
            staging[key] = _Head(cp.id, chans)
        return None

    def _cached(self, key: _Key) -> _Head | None:
        with self._lock:
            return self._cache.get(key)

    def _base_from_body(self, cur: Cursor, cp: Checkpoint) -> dict[str, _Chan]:
        """The parent's channels as its stored body names them (values unknown, so changed
        channels are stored in full). A root checkpoint (a new thread, a fork), a missing
        parent or a damaged one has none: its values are stored in full.
        """
        if cp.parent_id is None:
            return {}
        row = cur.execute(self._sql["body_of"], (cp.namespace, cp.thread_id, cp.parent_id)).fetchone()
        if row is None:
            return {}
        try:
            blobs = decode_body(row[0]).blobs or {}
        except RecordError:
            return {}  # a damaged parent: store this checkpoint's values in full
        return {ch: _Chan(blob, None, None) for ch, blob in blobs.items()}

    # -- reads -------------------------------------------------------------------------------

    def get(self, cur: Cursor, namespace: str, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        """One checkpoint (the head when ``checkpoint_id`` is None) with its pending writes."""
        if checkpoint_id is None:
            row = cur.execute(self._sql["head"], (namespace, thread_id)).fetchone()
        else:
            row = cur.execute(self._sql["one"], (namespace, thread_id, checkpoint_id)).fetchone()
        if row is None:
            return None
        cp = self._from_cache(namespace, thread_id, row)
        if cp is None:
            (cp,) = self._build(cur, namespace, thread_id, [row])
        pending = []
        for task_id, kind, wkey, value in cur.execute(self._sql["writes_of"], (namespace, thread_id, cp.id)):
            try:
                pending.append(PendingWrite(task_id=task_id, kind=kind, key=wkey, value=decode_json(value)))
            except RecordError as exc:
                raise CheckpointCorruptError(thread_id, cp.id, f"pending write {task_id!r}/{kind}: {exc}") from None
        return replace(cp, pending_writes=tuple(pending)) if pending else cp

    def history(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        *,
        limit: int | None,
        before: str | None,
        filter: Mapping[str, Any] | None,
    ) -> list[Checkpoint]:
        """The lineage newest first: one recursive query for the rows, one for their blobs.

        A filter is applied here, on decoded metadata, so it means exactly what it means in
        every other backend; with a filter the whole lineage is walked.
        """
        check_filter(filter)
        if limit is not None and limit <= 0:
            return []
        p = self._sql["lineage"]
        if before is None:
            start = "(SELECT max(id) FROM {P}checkpoints WHERE ns = ? AND thread_id = ?)"
            start_params: tuple[Any, ...] = (namespace, thread_id)
        else:
            start = "(SELECT parent_id FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?)"
            start_params = (namespace, thread_id, before)
        sql = p.replace("{start}", self._q(start.replace("{P}", self.dialect.prefix)))
        cap = limit if limit is not None and not filter else _NO_LIMIT
        where = (namespace, thread_id)
        params = (*where, *start_params, *where, cap, *where, *where)
        rows = cur.execute(sql, params).fetchall()
        chosen = []
        seen: set[str] = set()
        for row in rows:
            if row[0] in seen:
                break  # foreign data with a parent cycle
            seen.add(row[0])
            if filter and not matches(self._metadata(thread_id, row[0], row[4]), filter):
                continue
            chosen.append(row)
            if limit is not None and len(chosen) >= limit:
                break
        # When the chosen checkpoints are at least half the thread, their blobs are read by
        # id range (see _values): at most about as many rows again as needed are read.
        by_range = bool(chosen) and 2 * len(chosen) >= int(rows[0][6])
        return self._build(cur, namespace, thread_id, chosen, by_range=by_range)

    def list_threads(self, cur: Cursor, namespace: str | None) -> list[ThreadInfo]:
        """Every thread with its head and count, newest head first; never decodes data."""
        sql = self._sql["threads"]
        if namespace is None:
            rows = cur.execute(sql.replace("{where}", ""), ()).fetchall()
        else:
            rows = cur.execute(sql.replace("{where}", self._q("WHERE ns = ?")), (namespace,)).fetchall()
        return [
            ThreadInfo(
                thread_id=tid,
                namespace=ns,
                head_id=head,
                step=int(step),
                created_at=float(created),
                source=source,
                checkpoints=int(n),
            )
            for ns, tid, head, step, created, source, n in rows
        ]

    def _metadata(self, thread_id: str, cid: str, data: bytes) -> Any:
        try:
            meta = decode_json(data)
        except RecordError as exc:
            raise CheckpointCorruptError(thread_id, cid, f"metadata: {exc}") from None
        if not isinstance(meta, dict):
            raise CheckpointCorruptError(thread_id, cid, "metadata is not a JSON object")
        return meta

    def _from_cache(self, namespace: str, thread_id: str, row: Any) -> Checkpoint | None:
        """The checkpoint of ``row`` without touching its blobs, when it is the one this
        process last wrote on the thread: a checkpoint never changes once stored, so the
        values kept for computing deltas are its values (the common read of a thread's head
        right after a run needs no delta replay)."""
        head = self._cached((namespace, thread_id))
        if head is None or head.id != row[0]:
            return None
        try:
            body = decode_body(row[5])
        except RecordError as exc:
            raise CheckpointCorruptError(thread_id, row[0], str(exc)) from None
        if body.blobs is None or set(body.blobs) != set(head.chans):
            return None
        return Checkpoint(
            thread_id=thread_id,
            namespace=namespace,
            id=row[0],
            parent_id=row[1],
            step=int(row[2]),
            values=FrozenDict({ch: head.chans[ch].value for ch in body.blobs}),
            versions=body.versions,
            next_tasks=body.next_tasks,
            barriers=body.barriers,
            metadata=self._metadata(thread_id, row[0], row[4]),
            created_at=float(row[3]),
        )

    def _build(
        self, cur: Cursor, namespace: str, thread_id: str, rows: Sequence[Any], *, by_range: bool = False
    ) -> list[Checkpoint]:
        """Checkpoints from their rows, fetching and replaying all their blobs at once."""
        bodies: list[Body] = []
        keys: set[tuple[str, str]] = set()
        for row in rows:
            try:
                body = decode_body(row[5])
            except RecordError as exc:
                raise CheckpointCorruptError(thread_id, row[0], str(exc)) from None
            if body.blobs is None:
                raise CheckpointCorruptError(thread_id, row[0], "checkpoint body has no blob map")
            bodies.append(body)
            keys.update(body.blobs.items())
        values = self._values(cur, namespace, thread_id, keys, rows, bodies, by_range) if keys else {}
        out = []
        for row, body in zip(rows, bodies, strict=True):
            cid = row[0]
            blobs = body.blobs
            assert blobs is not None
            out.append(
                Checkpoint(
                    thread_id=thread_id,
                    namespace=namespace,
                    id=cid,
                    parent_id=row[1],
                    step=int(row[2]),
                    values=FrozenDict({ch: values[(ch, blob)] for ch, blob in blobs.items()}),
                    versions=body.versions,
                    next_tasks=body.next_tasks,
                    barriers=body.barriers,
                    metadata=self._metadata(thread_id, cid, row[4]),
                    created_at=float(row[3]),
                )
            )
        return out

    def _values(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        keys: set[tuple[str, str]],
        rows: Sequence[Any],
        bodies: Sequence[Body],
        by_range: bool,
    ) -> dict[Hashable, Any]:
        """The values of ``keys``: their blobs and bases fetched, then replayed together.

        By default one recursive query walks the delta chains from the keys. ``by_range``
        first reads, per channel, every blob between the oldest and newest key (an index
        range scan, much cheaper per row than a recursive step); the recursive query then
        fetches only what that missed (the bases older than the range).
        """
        stored: dict[Hashable, tuple[Hashable | None, bytes]] = {}
        seeds: Iterable[_Key] = keys
        if by_range:
            ranges: dict[str, tuple[str, str]] = {}
            for ch, blob in keys:
                lo, hi = ranges.get(ch, (blob, blob))
                ranges[ch] = (min(lo, blob), max(hi, blob))
            for ch, (lo, hi) in ranges.items():
                for channel, blob, base_id, data in cur.execute(
                    self._sql["blob_range"], (namespace, thread_id, ch, lo, hi)
                ).fetchall():
                    stored[(channel, blob)] = (None if base_id is None else (channel, base_id), bytes(data))
            seeds = cast(set[_Key], delta.unresolved(stored, keys))  # keys of the rows above
        missing: tuple[str, str] | None = None
        if seeds:
            ordered = sorted(seeds)
            params = [*self.dialect.keys_params(ordered), namespace, thread_id, namespace, thread_id]
            for channel, blob, base_id, data in cur.execute(self._sql["blobs"], params).fetchall():
                if data is None:
                    missing = missing or (channel, blob)
                    continue
                stored[(channel, blob)] = (None if base_id is None else (channel, base_id), bytes(data))
        try:
            return delta.replay(stored, keys)
        except delta.DeltaError as exc:
            bad = exc.key
            reason = f"channel value {bad!r}: {exc.reason}"
        if missing is not None:
            reason += f" (blob {missing!r} is missing)"
        culprit = rows[0][0]
        for row, body in zip(rows, bodies, strict=True):
            if body.blobs and any((ch, b) == bad for ch, b in body.blobs.items()):
                culprit = row[0]
                break
        raise CheckpointCorruptError(thread_id, culprit, reason)

    # -- housekeeping ------------------------------------------------------------------------

    def delete_thread(self, cur: Cursor, namespace: str, thread_id: str) -> None:
        """Remove a thread's checkpoints, blobs and pending writes (inside a transaction)."""
        for name in ("del_cps", "del_blobs", "del_writes"):
            cur.execute(self._sql[name], (namespace, thread_id))
        self.forget(namespace, thread_id)

    def prune(self, cur: Cursor, namespace: str, thread_id: str, keep_last: int) -> int:
        """Drop what ``keep_last`` does not keep, and every blob no kept checkpoint needs.

        Kept checkpoints whose parent is dropped become roots. Runs inside the caller's write
        transaction; a damaged kept checkpoint aborts it (nothing is dropped).
        """
        where = (namespace, thread_id)
        tree = {cid: (parent, body) for cid, parent, body in cur.execute(self._sql["tree"], where)}
        if not tree:
            return 0
        keep = keep_set({cid: parent for cid, (parent, _) in tree.items()}, keep_last)
        dropped = [cid for cid in tree if cid not in keep]
        need: set[tuple[str, str]] = set()
        for cid in keep:
            try:
                blobs = decode_body(tree[cid][1]).blobs or {}
            except RecordError as exc:
                raise CheckpointCorruptError(thread_id, cid, str(exc)) from None
            need.update(blobs.items())
        bases = {(ch, bid): base for ch, bid, base in cur.execute(self._sql["blob_keys"], where)}
        stack = list(need)
        while stack:
            ch, bid = stack.pop()
            base = bases.get((ch, bid))
            if base is not None and (ch, base) not in need:
                need.add((ch, base))
                stack.append((ch, base))
        if dropped:
            cur.executemany(self._sql["del_cp"], [(*where, cid) for cid in dropped])
            cur.executemany(self._sql["del_writes_of"], [(*where, cid) for cid in dropped])
        gone = [(*where, ch, bid) for ch, bid in bases if (ch, bid) not in need]
        if gone:
            cur.executemany(self._sql["del_blob"], gone)
        reroot = [(*where, cid) for cid in keep if tree[cid][0] is not None and tree[cid][0] not in keep]
        if reroot:
            cur.executemany(self._sql["reroot"], reroot)
        self.forget(namespace, thread_id)
        return len(dropped)

    def acquire_lease(self, cur: Cursor, namespace: str, thread_id: str, owner: str, ttl: float) -> None:
        """Take or renew the lease in one statement, on the database's wall clock.

        Raises:
            ThreadBusyError: another owner holds an unexpired lease.
        """
        if self._thread_lock:
            cur.execute(self._thread_lock, (namespace, thread_id))  # see Dialect.thread_lock
        for _ in range(3):
            if cur.execute(self._sql["lease"], (namespace, thread_id, owner, float(ttl))).fetchall():
                return
            held = cur.execute(self._sql["lease_holder"], (namespace, thread_id)).fetchone()
            if held is not None:
                raise ThreadBusyError(thread_id, held[0], max(0.0, float(held[1])))
        raise ThreadBusyError(thread_id, "another run", 0.0)  # released and retaken, repeatedly

    def release_lease(self, cur: Cursor, namespace: str, thread_id: str, owner: str) -> None:
        """Give the lease back if ``owner`` holds it."""
        cur.execute(self._sql["release"], (namespace, thread_id, owner))
