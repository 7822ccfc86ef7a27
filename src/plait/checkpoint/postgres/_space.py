"""Dead space in PostgreSQL: what ``plait db stats`` shows of it, and ``plait db vacuum``.

Deleting and pruning delete rows. PostgreSQL keeps a deleted row's space (a *dead tuple*)
until a vacuum marks it free for new rows of the same table; autovacuum does that on its own
once a table's dead rows pass its threshold (50 rows plus 20 % of the table by default). The
file itself rarely shrinks: only free pages at a table's end are handed back; ``VACUUM FULL``
or ``pg_repack`` rewrite a table to give the rest back (see docs/operating.md, "Space").

The dead bytes are estimated without the ``pgstattuple`` extension, which a database may not
have: each table's dead rows (``n_dead_tup``, from the statistics PostgreSQL keeps, updated
within a second or so of each transaction) times its average row's share of the table's size
(``pg_table_size``, its TOAST included, over its live and dead rows).
"""

from __future__ import annotations

from plait.checkpoint.space import DeadSpace
from plait.checkpoint.sql._base import Cursor

__all__ = ["TABLES", "dead_space", "total_bytes", "vacuum"]

TABLES = ("checkpoints", "blobs", "writes", "threads")
"""The checkpoint tables (after the prefix); the memory store's are left to autovacuum."""

_DEAD = """SELECT CAST(coalesce(sum(s.n_dead_tup), 0) AS BIGINT),
        CAST(coalesce(sum(CASE WHEN s.n_live_tup + s.n_dead_tup > 0
            THEN s.n_dead_tup * pg_table_size(s.relid) / (s.n_live_tup + s.n_dead_tup) ELSE 0 END), 0) AS BIGINT)
    FROM pg_stat_user_tables s WHERE s.relid IN (SELECT to_regclass(t) FROM unnest(%s::text[]) AS t)"""

_SIZE = """SELECT CAST(coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) AS BIGINT)
    FROM unnest(%s::text[]) AS t"""

_RECLAIM = (
    "autovacuum makes dead rows' space reusable by itself; plait db vacuum runs VACUUM now; "
    "only VACUUM FULL or pg_repack shrink the tables on disk"
)


def _names(prefix: str) -> list[str]:
    return [prefix + t for t in TABLES]


def dead_space(cur: Cursor, prefix: str) -> DeadSpace:
    """The dead rows of the checkpoint tables named with ``prefix``, and an estimate of their bytes."""
    rows, size = cur.execute(_DEAD, (_names(prefix),)).fetchone()
    return DeadSpace(bytes=int(size), rows=int(rows), estimated=True, reclaim=_RECLAIM)


def total_bytes(cur: Cursor, prefix: str) -> int:
    """What the checkpoint tables take on the server's disk, indexes and TOAST included."""
    (size,) = cur.execute(_SIZE, (_names(prefix),)).fetchone()
    return int(size)


def vacuum(cur: Cursor, prefix: str) -> int:
    """``VACUUM (ANALYZE)`` each checkpoint table, on a cursor of a connection in autocommit
    mode (VACUUM cannot run in a transaction); the bytes the tables shrank by on disk (free
    pages at their ends only: the rest becomes room for new rows). It takes no lock that
    stops reads or writes."""
    before = total_bytes(cur, prefix)
    for name in _names(prefix):
        cur.execute(f"VACUUM (ANALYZE) {name}")  # a prefix of plait's own, its schema quoted
    return max(before - total_bytes(cur, prefix), 0)
