"""The memory store in the SQL checkpoint store's database: a step's memory writes applied in
its commit's transaction, and the reads of :class:`~plait.store.records.MemoryBackend`, as
plain DB-API calls on a cursor (the tables and filters are in
:mod:`plait.checkpoint.sql._memory_sql`).

Part of :class:`plait.checkpoint.sql._core.SqlCore`; the checkpointer runs each call in a
transaction of the right kind (reads on the reading connection, refreshes and sweeps as
writes). The answers are the in-memory backend's (:mod:`plait.store.memory`, the reference)
for the same calls: order, expiry, ``created_at`` kept by an overwrite of a live item.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from plait._codec import canonical
from plait.checkpoint.sql._base import Cursor, Dialect
from plait.checkpoint.sql._memory_sql import (
    compile_filters,
    decode_namespace,
    encode_namespace,
    prefix_range,
    without_nul,
)
from plait.store.memory import expiry, pick_namespaces
from plait.store.records import MemorySearch, MemoryWrite, Namespace, NamespaceListing, StoredItem
from plait.store.vectors import dot, pack, unpack

__all__ = ["Found", "SqlMemory"]

BIG_NAMESPACE = 1000
"""Items under a search's prefix from which SQLite reads the newest items first (the recent
index, stopping at the page) rather than every item of the prefix, then sorted: a count it
makes first, bounded by this."""


@dataclass(frozen=True, slots=True)
class Found:
    """An item a read found, with what a refresh of its expiry needs."""

    item: StoredItem
    prefix: str
    ttl: float | None

    def refresh(self, now: int) -> tuple[int | None, str, str, int] | None:
        """The parameters of the ``refresh`` statement that extends it at ``now`` (None:
        it never expires)."""
        if self.ttl is None:
            return None
        return expiry(now, self.ttl), self.prefix, self.item.key, self.item.updated_at


class SqlMemory:
    """The memory store's statements over one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.jsonb = jsonb = dialect.jsonb
        items, vectors = dialect.prefix + "memory_items", dialect.prefix + "memory_vectors"
        self._items, self._vectors = items, vectors
        q = dialect.q
        value = "raw" if jsonb else "value"
        self._value = value
        cols = "prefix, key, value, raw" if jsonb else "prefix, key, value"
        marks = "?, ?, ?::jsonb, ?" if jsonb else "?, ?, ?"
        typed = "?::bigint, ?::bigint, ?::bigint, ?::float8" if jsonb else "?, ?, ?, ?"
        self._upsert = q(
            f"""INSERT INTO {items} AS m ({cols}, created_at, updated_at, expires_at, ttl) VALUES ({marks}, {typed})
            ON CONFLICT (prefix, key) DO UPDATE SET value = excluded.value,{" raw = excluded.raw," if jsonb else ""}
            created_at = CASE WHEN m.expires_at IS NULL OR m.expires_at > excluded.updated_at
                THEN m.created_at ELSE excluded.created_at END,
            updated_at = excluded.updated_at, expires_at = excluded.expires_at, ttl = excluded.ttl"""
        )
        self._del_item = q(f"DELETE FROM {items} WHERE prefix = ? AND key = ?")
        self._del_vectors = q(f"DELETE FROM {vectors} WHERE prefix = ? AND key = ?")
        self._ins_vector = q(
            f"INSERT INTO {vectors} (prefix, key, field, vector) VALUES (?, ?, ?, {'?::float8[]' if jsonb else '?'})"
            " ON CONFLICT (prefix, key, field) DO UPDATE SET vector = excluded.vector"
        )
        self._get = q(
            f"SELECT {value}, created_at, updated_at, ttl FROM {items}"
            " WHERE prefix = ? AND key = ? AND (expires_at IS NULL OR expires_at > ?)"
        )
        self._refresh = q(f"UPDATE {items} SET expires_at = ? WHERE prefix = ? AND key = ? AND updated_at = ?")
        self._sweep_vectors = q(
            f"DELETE FROM {vectors} WHERE (prefix, key) IN (SELECT prefix, key FROM {items} WHERE expires_at <= ?)"
        )
        self._sweep_items = q(f"DELETE FROM {items} WHERE expires_at <= ?")
        self._count_under = f"SELECT count(*) FROM (SELECT 1 FROM {items} WHERE prefix >= ? AND prefix < ? LIMIT ?)"
        self._q = q

    # -- writes ------------------------------------------------------------------------------

    def apply(self, cur: Cursor, writes: Sequence[MemoryWrite]) -> None:
        """Apply ``writes`` in order, in the caller's transaction. Statements only, no reads
        (so that a PostgreSQL commit still goes in one round trip)."""
        for w in writes:
            prefix = encode_namespace(w.namespace)
            where = (prefix, w.key)
            if w.value is None:
                cur.execute(self._del_item, where)
                cur.execute(self._del_vectors, where)
                continue
            text = canonical(w.value).decode()
            values: tuple[Any, ...] = (prefix, w.key, without_nul(text), text) if self.jsonb else (*where, text)
            cur.execute(self._upsert, (*values, w.at, w.at, expiry(w.at, w.ttl), w.ttl))
            cur.execute(self._del_vectors, where)
            if w.vectors:
                cur.executemany(
                    self._ins_vector,
                    [(prefix, w.key, f, list(v) if self.jsonb else pack(v)) for f, v in w.vectors],
                )

    def refresh(self, cur: Cursor, found: Sequence[Found], now: int) -> None:
        """Extend the expiry of the items a read found (those with a ttl) to ``now`` plus
        their ttl; an item written again since keeps its new write's expiry."""
        rows = [r for f in found if (r := f.refresh(now)) is not None]
        if rows:
            cur.executemany(self._refresh, rows)

    def sweep(self, cur: Cursor, now: int) -> int:
        """Delete the items expired at ``now`` and their vectors; how many items went."""
        cur.execute(self._sweep_vectors, (now,))
        done = cur.execute(self._sweep_items, (now,))
        return max(int(getattr(done, "rowcount", 0) or 0), 0)

    # -- reads -------------------------------------------------------------------------------

    def _found(self, ns: Namespace | None, prefix: str, key: str, row: Sequence[Any], score: float | None) -> Found:
        text, created, updated, ttl = row
        namespace = decode_namespace(prefix) if ns is None else ns
        item = StoredItem(namespace, key, orjson.loads(text), int(created), int(updated), score)
        return Found(item, prefix, None if ttl is None else float(ttl))

    def get(self, cur: Cursor, namespace: Namespace, key: str, now: int) -> Found | None:
        prefix = encode_namespace(namespace)
        row = cur.execute(self._get, (prefix, key, now)).fetchone()
        return None if row is None else self._found(namespace, prefix, key, row, None)

    def _where(self, prefix: Namespace, now: int, *, by_prefix: bool = True) -> tuple[str, list[Any]]:
        """The WHERE clause (alias ``i``) of items under ``prefix`` that are live at ``now``;
        not ``by_prefix``: SQLite is told not to look them up by prefix (``+``)."""
        sql = "(i.expires_at IS NULL OR i.expires_at > ?)"
        params: list[Any] = [now]
        span = prefix_range(prefix)
        if span is not None:
            sql += " AND i.prefix >= ? AND i.prefix < ?" if by_prefix else " AND +i.prefix >= ? AND +i.prefix < ?"
            params.extend(span)
        return self._q(sql), params

    def _by_prefix(self, cur: Cursor, search: MemorySearch) -> bool:
        """Whether a search newest first reads its prefix's items (few of them), rather than
        the newest items of all until its page is full (SQLite; PostgreSQL's planner has
        statistics to choose by)."""
        span = prefix_range(search.prefix)
        if self.jsonb or span is None or search.vector is not None:
            return True
        (n,) = cur.execute(self._count_under, (*span, BIG_NAMESPACE)).fetchone()
        return int(n) < BIG_NAMESPACE

    def search(self, cur: Cursor, search: MemorySearch) -> list[Found]:
        """The items ``search`` finds, in its order (see :class:`MemorySearch`)."""
        where, params = self._where(search.prefix, search.now, by_prefix=self._by_prefix(cur, search))
        filters, fparams = compile_filters(search.conditions, "i.value", jsonb=self.jsonb)
        where += filters
        params.extend(fparams)
        if search.vector is not None:
            if self.jsonb:
                return self._ranked_in_sql(cur, search, where, params)
            return self._ranked_here(cur, search, where, params)
        sql = self._q(
            f"SELECT i.prefix, i.key, i.{self._value}, i.created_at, i.updated_at, i.ttl FROM {self._items} i"
            f" WHERE {where} ORDER BY i.updated_at DESC, i.prefix, i.key LIMIT ? OFFSET ?"
        )
        rows = cur.execute(sql, (*params, search.limit, search.offset)).fetchall()
        return [self._found(None, r[0], r[1], r[2:], None) for r in rows]

    def _ranked_here(self, cur: Cursor, search: MemorySearch, where: str, params: list[Any]) -> list[Found]:
        """SQLite: the candidates' vectors found in SQL (prefix, expiry and filter), ranked
        here (an item by its best field), then the page's items read."""
        assert search.vector is not None
        query = search.vector
        sql = (
            f"SELECT i.prefix, i.key, v.vector FROM {self._items} i"
            f" JOIN {self._vectors} v ON v.prefix = i.prefix AND v.key = i.key WHERE {where}"
        )
        best: dict[tuple[str, str], float] = {}
        for prefix, key, blob in cur.execute(sql, params):
            score = dot(query, unpack(blob))
            old = best.get((prefix, key))
            if old is None or score > old:
                best[(prefix, key)] = score
        if search.limit == 0:
            return []
        top = heapq.nsmallest(search.offset + search.limit, best.items(), key=lambda e: (-e[1], e[0][0], e[0][1]))
        out: list[Found] = []
        for (prefix, key), score in top[search.offset :]:
            row = cur.execute(self._get, (prefix, key, search.now)).fetchone()
            if row is not None:  # (one snapshot: it is there)
                out.append(self._found(None, prefix, key, row, score))
        return out

    def _ranked_in_sql(self, cur: Cursor, search: MemorySearch, where: str, params: list[Any]) -> list[Found]:
        """PostgreSQL: scores computed and ranked in the database (an item by its best field)."""
        assert search.vector is not None
        span = prefix_range(search.prefix)
        inner = "" if span is None else " WHERE v.prefix >= %s AND v.prefix < %s"
        sql = (
            "SELECT i.prefix, i.key, i.raw, i.created_at, i.updated_at, i.ttl, s.score FROM ("
            "SELECT v.prefix, v.key, max((SELECT coalesce(sum(a * b), 0) FROM unnest(v.vector, %s::float8[])"
            f" AS t (a, b))) AS score FROM {self._vectors} v{inner} GROUP BY v.prefix, v.key) s"
            f" JOIN {self._items} i ON i.prefix = s.prefix AND i.key = s.key"
            f" WHERE {where} ORDER BY s.score DESC, i.prefix, i.key LIMIT %s OFFSET %s"
        )
        args = [list(search.vector), *(span or ()), *params, search.limit, search.offset]
        rows = cur.execute(sql, args).fetchall()
        return [self._found(None, r[0], r[1], r[2:6], float(r[6])) for r in rows]

    def namespaces(self, cur: Cursor, listing: NamespaceListing) -> list[Namespace]:
        """The namespaces ``listing`` finds: those holding a live item under the literal
        part of its prefix are read here, the rest of the listing is the reference's."""
        literal: list[str] = []
        for label in listing.prefix or ():
            if label == "*":
                break
            literal.append(label)
        where, params = self._where(tuple(literal), listing.now)
        rows = cur.execute(f"SELECT DISTINCT i.prefix FROM {self._items} i WHERE {where}", params).fetchall()
        return pick_namespaces([decode_namespace(r[0]) for r in rows], listing)
