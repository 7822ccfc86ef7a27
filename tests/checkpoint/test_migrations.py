"""Migrations are scoped per component: a second component's tables in the same database (the
run queue's, later) keep their own version and never move the checkpoint store's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from plait.checkpoint._migrations import Component
from plait.checkpoint.sql._base import Dialect
from plait.checkpoint.sql._core import SqlCore
from plait.checkpoint.sql._schema import SCHEMA_VERSION
from plait.errors import StoreVersionError


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Dialect, Any]]:
    """A dialect and a transaction runner on an empty database of each SQL backend."""
    if request.param == "sqlite":
        import sqlite3

        from plait.checkpoint.sqlite._store import _DIALECT

        conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)

        def run(fn: Any) -> Any:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn.cursor())
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return out

        with closing(conn):
            yield _DIALECT, run
    else:
        import psycopg

        from plait.checkpoint.postgres._dialect import pg_dialect as _dialect

        dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("postgres_schema")

        def run_pg(fn: Any) -> Any:
            with psycopg.connect(dsn) as conn, conn.cursor() as cur:
                return fn(cur)

        yield _dialect(schema), run_pg


def _queue(dialect: Dialect, versions: int) -> Component:
    table = dialect.prefix + "queue_migrations"
    migrations = {
        v: [dialect.q(f"CREATE TABLE {dialect.prefix}queue_v{v} (id INTEGER PRIMARY KEY)")]
        for v in range(1, versions + 1)
    }
    return Component(name="test queue", table=table, migrations=migrations, dialect=dialect)


def test_a_second_component_keeps_its_own_version_beside_the_store(db: tuple[Dialect, Any]) -> None:
    dialect, run = db
    store = SqlCore(dialect, "store")
    assert run(lambda cur: store.component.migrate(cur, "store")) == 0
    queue = _queue(dialect, 2)
    assert run(lambda cur: queue.migrate(cur, "store")) == 0
    assert run(queue.version) == 2
    assert run(store.component.version) == SCHEMA_VERSION  # untouched by the queue's two versions
    run(lambda cur: store.component.check(cur, "store"))
    newer = _queue(dialect, 3)
    assert run(lambda cur: newer.migrate(cur, "store")) == 2  # only version 3 ran
    assert run(newer.version) == 3 and run(store.component.version) == SCHEMA_VERSION


def test_a_component_newer_than_the_code_is_refused(db: tuple[Dialect, Any]) -> None:
    dialect, run = db
    run(lambda cur: _queue(dialect, 3).migrate(cur, "store"))
    older = _queue(dialect, 2)
    with pytest.raises(StoreVersionError):
        run(lambda cur: older.migrate(cur, "store"))
    with pytest.raises(StoreVersionError):
        run(lambda cur: older.check(cur, "store"))
