"""The stored retention policy on SQL backends: a one-row table, a migrations component of
its own (see :mod:`plait.checkpoint._migrations`), so that it never bumps the checkpoint
store's version and an older plait keeps reading a database that holds one.

The table is made the first time a policy is stored; a database without it has no policy.
"""

from __future__ import annotations

import json
import time
from typing import Any

from plait.checkpoint._migrations import Component
from plait.checkpoint.sql._base import Cursor, Dialect

__all__ = ["SqlPolicy"]

_MIGRATIONS = {
    1: (
        "CREATE TABLE IF NOT EXISTS {P}retention_policy ("
        "id INTEGER PRIMARY KEY CHECK (id = 1), policy TEXT NOT NULL, set_at {real} NOT NULL)",
    ),
}


class SqlPolicy:
    """Reads and writes the stored policy inside a caller's transaction."""

    def __init__(self, dialect: Dialect, store: str) -> None:
        self._d = dialect
        self._store = store
        self.component = Component(
            name="retention policy",
            table=dialect.prefix + "retention_migrations",
            migrations={
                v: tuple(s.format(P=dialect.prefix, real=dialect.real) for s in m) for v, m in _MIGRATIONS.items()
            },
            dialect=dialect,
        )

    def read(self, cur: Cursor) -> Any:
        """The stored policy as JSON data, or None (none stored, or never set up here)."""
        found = self.component.version(cur)
        if found == 0:
            return None
        self.component.check(cur, self._store)
        row = cur.execute(f"SELECT policy FROM {self._d.prefix}retention_policy WHERE id = 1").fetchone()
        return None if row is None else json.loads(row[0])

    def write(self, cur: Cursor, data: dict[str, Any] | None) -> None:
        """Store ``data`` as the policy, or remove it (None)."""
        self.component.migrate(cur, self._store)
        cur.execute(f"DELETE FROM {self._d.prefix}retention_policy WHERE id = 1")
        if data is not None:
            cur.execute(
                self._d.q(f"INSERT INTO {self._d.prefix}retention_policy (id, policy, set_at) VALUES (1, ?, ?)"),
                (json.dumps(data), time.time()),
            )
