"""Schema migrations scoped per component of a database plait shares.

The checkpoint store is one component; the run queue's tables (``plait.runs``) are another,
in the same database. Each component keeps its own version in its own table (``{P}migrations`` for
the checkpoint store, ``{P}<name>_migrations`` for the others), so adding a table to one
never bumps another's version, and an older plait that knows only the checkpoint store keeps
reading it when a newer one added a run queue beside it.

A migration is never edited once released: a change is a new version whose statements bring
the component from the previous version to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from plait.checkpoint.sql._base import Cursor
from plait.errors import StoreVersionError

__all__ = ["Component", "MigrationDialect"]


class MigrationDialect(Protocol):
    """The part of a dialect that migrations use: the checkpoint store's
    :class:`~plait.checkpoint.sql._base.Dialect` is one; the run queue, which shares none
    of the rest of it, brings its own."""

    @property
    def real(self) -> str: ...

    @property
    def table_exists(self) -> str:
        """A query returning a non-NULL first column when the table named by its parameter exists."""
        ...

    @property
    def table_exists_param(self) -> Callable[[str], str]: ...

    def q(self, sql: str) -> str:
        """``sql`` with its ``?`` markers replaced by this engine's parameter marker."""
        ...


@dataclass(frozen=True, slots=True)
class Component:
    """One component's migrations, ready to run on a dialect.

    Args:
        name: what it is, for messages ("checkpoint store", "run queue").
        table: its migrations table, the dialect's prefix included.
        migrations: version -> the statements (already formatted for the dialect) that
            bring the component from the previous version to it.
        after: version -> a data step run right after that version's statements, given the
            version found before migrating (e.g. filling a new column of old rows).
    """

    name: str
    table: str
    migrations: Mapping[int, Sequence[str]]
    dialect: MigrationDialect
    after: Mapping[int, Callable[[Cursor, int], None]] = field(default_factory=dict)

    @property
    def latest(self) -> int:
        """The version this code reads and writes."""
        return max(self.migrations, default=0)

    def version(self, cur: Cursor) -> int:
        """The component's version in the database; 0 when it was never set up."""
        d = self.dialect
        if cur.execute(d.q(d.table_exists), (d.table_exists_param(self.table),)).fetchone()[0] is None:
            return 0
        found = cur.execute(f"SELECT max(version) FROM {self.table}").fetchone()[0]
        return int(found or 0)

    def check(self, cur: Cursor, store: str) -> None:
        """Refuse a database whose component this code does not read, saying what to do.

        Raises:
            StoreVersionError: it is newer than this code, or not (fully) set up.
        """
        found = self.version(cur)
        if found != self.latest:
            raise StoreVersionError(store, found, self.latest)

    def migrate(self, cur: Cursor, store: str, *, target: int | None = None) -> int:
        """Bring the component to :attr:`latest` (or ``target``, an older version, as an
        older plait left it: for upgrade tests) inside the caller's transaction.

        Returns:
            The version found before migrating.

        Raises:
            StoreVersionError: the component was written by a newer plait.
        """
        d = self.dialect
        cur.execute(
            d.q(f"CREATE TABLE IF NOT EXISTS {self.table} (version INTEGER PRIMARY KEY, applied_at {d.real} NOT NULL)")
        )
        found = self.version(cur)
        if found > self.latest:
            raise StoreVersionError(store, found, self.latest)
        goal = self.latest if target is None else target
        for version in sorted(self.migrations):
            if found < version <= goal:
                for statement in self.migrations[version]:
                    cur.execute(statement)
                step = self.after.get(version)
                if step is not None:
                    step(cur, found)
                cur.execute(
                    d.q(f"INSERT INTO {self.table} (version, applied_at) VALUES (?, ?)"), (version, time.time())
                )
        return found
