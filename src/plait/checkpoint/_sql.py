"""The SQL checkpoint store, written once for SQLite and PostgreSQL.

Everything a SQL backend does (schema and migrations, commit, reads, housekeeping, leases)
lives here as plain DB-API calls on a cursor; a dialect (:class:`Dialect`) supplies only the
few fragments that differ (column types, the parameter marker, the database clock, how a
list of keys is passed, how a table's existence is checked). The dialect modules own
connections, threads and transactions, and call into :class:`SqlCore` inside them.

Layout (``P`` is the table prefix, which includes the Postgres schema when one is set)::

    P_migrations  version, applied_at             the schema version this store is at
    P_checkpoints ns, thread_id, id -> parent_id, step, created_at, source, metadata, body
    P_blobs       ns, thread_id, channel, id -> base_id, data
    P_writes      seq, (ns, thread_id, checkpoint_id, task_id, kind, wkey) unique -> value
    P_leases      ns, thread_id -> owner, expires_at

A checkpoint row holds metadata and a small body (versions, ``channel -> blob id``, next
tasks, barriers). A blob is one channel's value as written by one checkpoint (its id is that
checkpoint's id): JSON in full when ``base_id`` is NULL, else a delta against the blob
``base_id`` of the same channel (see :mod:`plait.checkpoint.delta`). A checkpoint stores a
blob only for the channels it changed and points at its parent's blobs for the rest, so
branches inside a thread share blobs and storage grows with what was written.

Every statement is idempotent (upserts), so a commit whose outcome is unknown (the
connection dropped during COMMIT) can be retried safely.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from plait._frozen import FrozenDict
from plait.checkpoint import delta
from plait.checkpoint._common import check_filter, keep_set, matches
from plait.checkpoint._records import Body, RecordError, decode_body, decode_json, encode_body, encode_json
from plait.checkpoint.base import Checkpoint, CheckpointWrite, PendingWrite, ThreadInfo, WritesBatch
from plait.errors import CheckpointCorruptError, CheckpointError, StoreVersionError, ThreadBusyError

__all__ = ["SCHEMA_VERSION", "CommitRequest", "Cursor", "Dialect", "SqlCore"]

SCHEMA_VERSION = 1
"""The schema version this code reads and writes."""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE {P}checkpoints (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, id TEXT NOT NULL, parent_id TEXT,
            step BIGINT NOT NULL, created_at {real} NOT NULL, source TEXT NOT NULL,
            metadata {blob} NOT NULL, body {blob} NOT NULL,
            PRIMARY KEY (ns, thread_id, id)){small_table}""",
        """CREATE TABLE {P}blobs (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, channel TEXT NOT NULL, id TEXT NOT NULL,
            base_id TEXT, data {blob} NOT NULL,
            PRIMARY KEY (ns, thread_id, channel, id))""",
        """CREATE TABLE {P}writes (
            seq {serial_pk}, ns TEXT NOT NULL, thread_id TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
            task_id TEXT NOT NULL, kind TEXT NOT NULL, wkey TEXT NOT NULL, value {blob} NOT NULL,
            UNIQUE (ns, thread_id, checkpoint_id, task_id, kind, wkey))""",
        """CREATE TABLE {P}leases (
            ns TEXT NOT NULL, thread_id TEXT NOT NULL, owner TEXT NOT NULL, expires_at {real} NOT NULL,
            PRIMARY KEY (ns, thread_id)){small_table}""",
    ),
}

_SQL = {
    "version": "SELECT max(version) FROM {P}migrations",
    "mig_table": "CREATE TABLE IF NOT EXISTS {P}migrations (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)",
    "mig_done": "INSERT INTO {P}migrations (version, applied_at) VALUES (?, ?)",
    "ins_cp": """INSERT INTO {P}checkpoints
        (ns, thread_id, id, parent_id, step, created_at, source, metadata, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, id) DO UPDATE SET parent_id = excluded.parent_id, step = excluded.step,
        created_at = excluded.created_at, source = excluded.source, metadata = excluded.metadata,
        body = excluded.body""",
    "ins_blob": """INSERT INTO {P}blobs (ns, thread_id, channel, id, base_id, data) VALUES (?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, channel, id) DO UPDATE SET base_id = excluded.base_id, data = excluded.data""",
    "ins_write": """INSERT INTO {P}writes (ns, thread_id, checkpoint_id, task_id, kind, wkey, value)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (ns, thread_id, checkpoint_id, task_id, kind, wkey) DO UPDATE SET value = excluded.value""",
    "del_writes_of": "DELETE FROM {P}writes WHERE ns = ? AND thread_id = ? AND checkpoint_id = ?",
    "exists": "SELECT 1 FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "body_of": "SELECT body FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "head": """SELECT id, parent_id, step, created_at, metadata, body FROM {P}checkpoints
        WHERE ns = ? AND thread_id = ? ORDER BY id DESC LIMIT 1""",
    "one": """SELECT id, parent_id, step, created_at, metadata, body FROM {P}checkpoints
        WHERE ns = ? AND thread_id = ? AND id = ?""",
    "writes_of": """SELECT task_id, kind, wkey, value FROM {P}writes
        WHERE ns = ? AND thread_id = ? AND checkpoint_id = ? ORDER BY seq""",
    # The lineage walk: one recursive query. ``depth`` bounds it by the limit, and by the
    # thread's size so that foreign data with a parent cycle cannot make it run forever.
    "lineage": """WITH RECURSIVE lin (id, parent_id, step, created_at, metadata, body, depth) AS (
            SELECT id, parent_id, step, created_at, metadata, body, 0 FROM {P}checkpoints
            WHERE ns = ? AND thread_id = ? AND id = {start}
          UNION ALL
            SELECT c.id, c.parent_id, c.step, c.created_at, c.metadata, c.body, lin.depth + 1
            FROM lin JOIN {P}checkpoints c ON c.ns = ? AND c.thread_id = ? AND c.id = lin.parent_id
            WHERE lin.depth + 1 < ?
              AND lin.depth < (SELECT count(*) FROM {P}checkpoints WHERE ns = ? AND thread_id = ?)
        )
        SELECT id, parent_id, step, created_at, metadata, body FROM lin ORDER BY depth""",
    # The blob chains of a set of (channel, blob id) keys, bases included: one recursive
    # query on keys only (UNION shares the chains of several checkpoints), then the data.
    "blobs": """WITH RECURSIVE need (channel, id) AS (
            {keys}
          UNION
            SELECT b.channel, b.base_id FROM need JOIN {P}blobs b
              ON b.ns = ? AND b.thread_id = ? AND b.channel = need.channel AND b.id = need.id
            WHERE b.base_id IS NOT NULL
        )
        SELECT need.channel, need.id, b.base_id, b.data FROM need LEFT JOIN {P}blobs b
          ON b.ns = ? AND b.thread_id = ? AND b.channel = need.channel AND b.id = need.id""",
    "threads": """SELECT c.ns, c.thread_id, c.id, c.step, c.created_at, c.source, g.n
        FROM (SELECT ns, thread_id, max(id) AS head, count(*) AS n FROM {P}checkpoints {where}
              GROUP BY ns, thread_id) g
        JOIN {P}checkpoints c ON c.ns = g.ns AND c.thread_id = g.thread_id AND c.id = g.head
        ORDER BY c.id DESC""",
    "del_cps": "DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ?",
    "del_blobs": "DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ?",
    "del_writes": "DELETE FROM {P}writes WHERE ns = ? AND thread_id = ?",
    "tree": "SELECT id, parent_id, body FROM {P}checkpoints WHERE ns = ? AND thread_id = ?",
    "blob_keys": "SELECT channel, id, base_id FROM {P}blobs WHERE ns = ? AND thread_id = ?",
    "del_cp": "DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "del_blob": "DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ? AND channel = ? AND id = ?",
    "reroot": "UPDATE {P}checkpoints SET parent_id = NULL WHERE ns = ? AND thread_id = ? AND id = ?",
    # A lease is taken in one statement: insert, or take over when the holder is the same
    # owner or its lease has expired. No row back means another owner holds it.
    "lease": """INSERT INTO {P}leases AS l (ns, thread_id, owner, expires_at) VALUES (?, ?, ?, {now} + ?)
        ON CONFLICT (ns, thread_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
        WHERE l.owner = excluded.owner OR l.expires_at <= {now}
        RETURNING owner""",
    "lease_holder": "SELECT owner, expires_at - {now} FROM {P}leases WHERE ns = ? AND thread_id = ?",
    "release": "DELETE FROM {P}leases WHERE ns = ? AND thread_id = ? AND owner = ?",
}

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
    small_table: str = ""
    """Appended to CREATE TABLE of tables with small rows (SQLite: `` WITHOUT ROWID``, which
    keeps such a table in one b-tree instead of a table and its primary-key index)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitRequest:
    """One ``commit()`` call: all of it is stored, or none of it."""

    checkpoints: Sequence[CheckpointWrite]
    writes: Sequence[WritesBatch]


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
        self._sql = {k: self._q(v.format(**fmt)) for k, v in _SQL.items()}
        self._migrations = {v: tuple(self._q(s.format(**fmt)) for s in stmts) for v, stmts in _MIGRATIONS.items()}
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

        Returns:
            Per request: None when it is durable, else the exception that refused it.
        """

        def run(batch: Sequence[CommitRequest]) -> Callable[[Cursor], dict[_Key, _Head]]:
            def apply_all(cur: Cursor) -> dict[_Key, _Head]:
                staging: dict[_Key, _Head] = {}  # fresh on every attempt
                for request in batch:
                    self._apply(cur, request, staging)
                return staging

            return apply_all

        try:
            self._publish(transaction(run(requests)))
            return [None] * len(requests)
        except Exception as exc:
            if len(requests) == 1:
                return [exc]
        results: list[Exception | None] = []
        for request in requests:
            try:
                self._publish(transaction(run([request])))
            except Exception as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    def check_request(self, request: CommitRequest) -> None:
        """Refuse, before anything is written, text this store cannot hold.

        Channel names are passed to the blob query as JSON, where SQLite truncates a string
        at NUL, so a NUL in a channel name is refused everywhere; when text columns cannot
        hold NUL at all (PostgreSQL), ids, namespaces and write keys with NUL are refused too.

        Raises:
            CheckpointError: naming the offending text.
        """
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

    def _apply(self, cur: Cursor, request: CommitRequest, staging: dict[_Key, _Head]) -> None:
        sql = self._sql
        for batch in request.writes:
            if batch.writes:
                cur.executemany(
                    sql["ins_write"],
                    [
                        (
                            batch.namespace,
                            batch.thread_id,
                            batch.checkpoint_id,
                            w.task_id,
                            w.kind,
                            w.key,
                            encode_json(w.value),
                        )
                        for w in batch.writes
                    ],
                )
        for cw in request.checkpoints:
            cp = cw.checkpoint
            key = (cp.namespace, cp.thread_id)
            base = self._base_of(cur, cp, staging.get(key) or self._cached(key))
            head = _Head(cp.id)
            rows = []
            for ch, value in cp.values.items():
                prev = base.get(ch)
                if prev is not None and ch not in cw.changed:
                    head.chans[ch] = _Chan(prev.blob, value, prev.chain)
                    continue
                if prev is not None and prev.chain is not None:
                    data, is_delta, chain = delta.encode(value, prev.value, prev.chain)
                else:
                    data, is_delta, chain = delta.encode(value)
                base_id = prev.blob if is_delta and prev is not None else None
                rows.append((cp.namespace, cp.thread_id, ch, cp.id, base_id, data))
                head.chans[ch] = _Chan(cp.id, value, chain)
            body = encode_body(cp, blobs={ch: c.blob for ch, c in head.chans.items()})
            source = str(cp.metadata.get("source", "")).replace("\x00", "\ufffd")  # text columns refuse NUL
            cur.execute(
                sql["ins_cp"],
                (
                    cp.namespace,
                    cp.thread_id,
                    cp.id,
                    cp.parent_id,
                    cp.step,
                    cp.created_at,
                    source if isinstance(source, str) else str(source),
                    encode_json(cp.metadata),
                    body,
                ),
            )
            if rows:
                cur.executemany(sql["ins_blob"], rows)
            if cw.folds_parent_writes and cp.parent_id is not None:
                cur.execute(sql["del_writes_of"], (cp.namespace, cp.thread_id, cp.parent_id))
            staging[key] = head

    def _cached(self, key: _Key) -> _Head | None:
        with self._lock:
            return self._cache.get(key)

    def _base_of(self, cur: Cursor, cp: Checkpoint, cached: _Head | None) -> dict[str, _Chan]:
        """The parent's channels: from the cache when it holds the parent, else from its body.

        A root checkpoint (a new thread, a fork) has none, so its values are stored in full.
        """
        if cp.parent_id is None:
            return {}
        where = (cp.namespace, cp.thread_id, cp.parent_id)
        if cached is not None and cached.id == cp.parent_id:
            # The parent may have been pruned or deleted by another process since.
            if cur.execute(self._sql["exists"], where).fetchone() is not None:
                return cached.chans
            return {}
        row = cur.execute(self._sql["body_of"], where).fetchone()
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
        params = (namespace, thread_id, *start_params, namespace, thread_id, cap, namespace, thread_id)
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
        return self._build(cur, namespace, thread_id, chosen)

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

    def _build(self, cur: Cursor, namespace: str, thread_id: str, rows: Sequence[Any]) -> list[Checkpoint]:
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
        values = self._values(cur, namespace, thread_id, keys, rows, bodies) if keys else {}
        out = []
        for row, body in zip(rows, bodies, strict=True):
            cid, parent_id, step, created_at, metadata, _ = row
            assert body.blobs is not None
            out.append(
                Checkpoint(
                    thread_id=thread_id,
                    namespace=namespace,
                    id=cid,
                    parent_id=parent_id,
                    step=int(step),
                    values=FrozenDict({ch: values[(ch, blob)] for ch, blob in body.blobs.items()}),
                    versions=body.versions,
                    next_tasks=body.next_tasks,
                    barriers=body.barriers,
                    metadata=self._metadata(thread_id, cid, metadata),
                    created_at=float(created_at),
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
    ) -> dict[Hashable, Any]:
        ordered = sorted(keys)
        params = [*self.dialect.keys_params(ordered), namespace, thread_id, namespace, thread_id]
        stored: dict[Hashable, tuple[Hashable | None, bytes]] = {}
        missing: tuple[str, str] | None = None
        for channel, blob, base_id, data in cur.execute(self._sql["blobs"], params):
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
