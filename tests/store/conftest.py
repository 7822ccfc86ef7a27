"""The ``store`` fixture: a :class:`plait.Store` on every backend that keeps one.

``store`` is a store as users get it: ``Store()`` (this process), and the ``.store`` of a
memory, a SQLite and a PostgreSQL checkpointer (a fresh database file or schema per test;
PostgreSQL skips without PLAIT_TEST_POSTGRES_DSN and fails under PLAIT_REQUIRE_POSTGRES=1,
as the checkpoint tests do)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait import Checkpointer, MemoryCheckpointer, PostgresCheckpointer, SqliteCheckpointer, Store


@pytest.fixture(params=["store", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    cp: Checkpointer | None = None
    if request.param == "store":
        made = Store()
    elif request.param == "memory":
        cp = MemoryCheckpointer()
        made = cp.store
    elif request.param == "sqlite":
        cp = SqliteCheckpointer(tmp_path / "s.db")
        made = cp.store
    else:
        pg = PostgresCheckpointer(
            request.getfixturevalue("postgres_dsn"), schema=request.getfixturevalue("postgres_schema")
        )
        cp = pg
        pg.migrate()
        made = pg.store
    try:
        yield made
    finally:
        made.close()
        if cp is not None:
            asyncio.run(cp.aclose())
