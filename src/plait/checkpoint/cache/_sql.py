"""The node cache in a SQL checkpointer's database: one table, ``{P}node_cache``, with a
migrations component of its own (as the stored retention policy has, see
:mod:`plait.checkpoint.sql._policy`), so that it never bumps the checkpoint store's version
and an older plait keeps reading a database that holds one. The table is made by the first
store; a database without it has an empty cache.

Expiry is by the checkpointer's lease clock (``clock=``; on PostgreSQL the server's unless one
is given), the clock every process sharing the database agrees on. A read skips an expired
entry; the next store of its key replaces it, and :meth:`SqlCache.asweep` removes them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from plait.checkpoint._migrations import Component
from plait.checkpoint.cache._base import NodeCache
from plait.checkpoint.sql._base import Cursor, Dialect

__all__ = ["SqlCache"]

_MIGRATIONS = {
    1: (
        "CREATE TABLE IF NOT EXISTS {P}node_cache (ns TEXT NOT NULL, key TEXT NOT NULL, "
        "value TEXT NOT NULL, expires_at {real}, PRIMARY KEY (ns, key))",
    ),
}


class SqlCache(NodeCache):
    """The cache of one SQL checkpointer: its dialect, its name for messages, its clock,
    how it writes in a transaction and how it reads a few SELECTs (no transaction needed: an
    entry is one row; :class:`~plait.checkpoint.sql._checkpointer.SqlCheckpointer` hands
    them over)."""

    def __init__(
        self,
        dialect: Dialect,
        store: str,
        *,
        reading: Callable[[Callable[[Cursor], Any]], Awaitable[Any]],
        writing: Callable[[Callable[[Cursor], Any]], Awaitable[Any]],
        now: Callable[[], float | None],
    ) -> None:
        d = dialect
        self._store = store
        self._reading, self._writing, self._now = reading, writing, now
        self.component = Component(
            name="node cache",
            table=d.prefix + "cache_migrations",
            migrations={v: tuple(s.format(P=d.prefix, real=d.real) for s in m) for v, m in _MIGRATIONS.items()},
            dialect=d,
        )
        t, clock = d.prefix + "node_cache", d.clock
        self._get = d.q(
            f"SELECT value FROM {t} WHERE ns = ? AND key = ? AND (expires_at IS NULL OR expires_at > {clock})"
        )
        upsert = " ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at"
        self._set_ttl = d.q(f"INSERT INTO {t} (ns, key, value, expires_at) VALUES (?, ?, ?, {clock} + ?)" + upsert)
        self._set = d.q(f"INSERT INTO {t} (ns, key, value, expires_at) VALUES (?, ?, ?, NULL)" + upsert)
        self._clear_ns = d.q(f"DELETE FROM {t} WHERE ns = ?")
        self._clear_all = f"DELETE FROM {t}"
        self._sweep = d.q(f"DELETE FROM {t} WHERE expires_at IS NOT NULL AND expires_at <= {clock}")
        self._table_made = False
        """The table is known to be there at this code's version (checked once per process)."""

    def _usable(self, cur: Cursor) -> bool:
        """Whether the table exists (checked at this code's version); False: an empty cache."""
        if not self._table_made:
            if self.component.version(cur) == 0:
                return False
            self.component.check(cur, self._store)
            self._table_made = True
        return True

    async def _make(self) -> None:
        """Make the table (once per process). Sibling tasks, or other processes, may make
        it at the same moment: the one whose transaction loses finds it made, and goes on."""
        try:
            await self._writing(lambda cur: self.component.migrate(cur, self._store))
        except Exception:
            if not await self._reading(self._usable):
                raise
        self._table_made = True

    async def aget(self, namespace: str, key: str) -> str | None:
        now = self._now()

        def read(cur: Cursor) -> str | None:
            if not self._usable(cur):
                return None
            row = cur.execute(self._get, (namespace, key, now)).fetchone()
            return None if row is None else row[0]

        found: str | None = await self._reading(read)
        return found

    async def aset(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        now = self._now()

        if not self._table_made:
            await self._make()

        def write(cur: Cursor) -> None:
            if ttl is None:
                cur.execute(self._set, (namespace, key, value))
            else:
                cur.execute(self._set_ttl, (namespace, key, value, now, float(ttl)))

        await self._writing(write)

    async def aclear(self, namespaces: Sequence[str] | None = None) -> int:
        def clear(cur: Cursor) -> int:
            if not self._usable(cur):
                return 0
            if namespaces is None:
                return max(int(cur.execute(self._clear_all).rowcount), 0)
            return sum(max(int(cur.execute(self._clear_ns, (ns,)).rowcount), 0) for ns in set(namespaces))

        removed: int = await self._writing(clear)
        return removed

    async def asweep(self) -> int:
        now = self._now()

        def sweep(cur: Cursor) -> int:
            if not self._usable(cur):
                return 0
            return max(int(cur.execute(self._sweep, (now,)).rowcount), 0)

        swept: int = await self._writing(sweep)
        return swept

    def __repr__(self) -> str:
        return f"<node cache in {self._store}>"
