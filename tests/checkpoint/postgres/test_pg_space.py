"""PostgreSQL: deleting threads leaves dead rows, which ``aspace()`` reports (rows from
``pg_stat_user_tables``, bytes estimated) until a vacuum; ``areclaim_space(full=True)`` runs it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from plait.checkpoint.space import DeadSpace

from .._backend_helpers import append_chat

psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("plait.checkpoint.postgres")

pytestmark = pytest.mark.postgres

THREADS, STEPS = 10, 50


def _sql(dsn: str, statement: str) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def _until(read: Callable[[], DeadSpace | None], ok: Callable[[DeadSpace], bool]) -> DeadSpace:
    """PostgreSQL's statistics arrive a moment after a transaction (each backend flushes its
    counts when idle): poll for them, not for anything plait does."""
    deadline = time.monotonic() + 30
    while True:
        dead = read()
        assert dead is not None
        if ok(dead) or time.monotonic() > deadline:
            return dead
        time.sleep(0.2)


def test_deleted_rows_are_dead_space_until_a_vacuum(postgres_dsn: str, postgres_schema: str) -> None:
    store = postgres.PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
    try:
        store.setup()
        for table in ("checkpoints", "blobs", "writes", "threads"):  # so that no autovacuum races the test
            _sql(postgres_dsn, f'ALTER TABLE "{postgres_schema}".plait_{table} SET (autovacuum_enabled = false)')

        async def fill() -> None:
            for t in range(THREADS):
                await append_chat(store, f"t{t}", STEPS, size=1000)

        asyncio.run(fill())
        size = f"SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{postgres_schema}' AND c.relkind = 'r'"  # noqa: E501
        full = int(_sql(postgres_dsn, size)[0][0])
        payload = sum(t.bytes or 0 for t in store.space().threads)
        for t in range(THREADS - 1):
            store.delete_thread(f"t{t}")
        # Each deleted checkpoint is a dead row in the checkpoints and the blobs tables (and
        # every commit's update of its thread's row left one too).
        gone = 2 * (THREADS - 1) * STEPS
        dead = _until(lambda: store.space().dead, lambda d: (d.rows or 0) >= gone and (d.bytes or 0) > payload * 0.5)
        assert dead.estimated and dead.rows is not None and dead.rows >= gone, dead
        assert dead.bytes is not None and payload * 0.5 < dead.bytes < full, (dead, payload, full)
        assert "autovacuum" in dead.reclaim
        assert store.reclaim_space() is None  # the default leaves it to autovacuum
        freed = store.reclaim_space(full=True)
        after = int(_sql(postgres_dsn, size)[0][0])
        print(
            f"postgres {THREADS}x{STEPS}, delete {THREADS - 1}: tables {full} bytes, dead {dead.rows} rows "
            f"~{dead.bytes} bytes (payload {payload}); VACUUM freed {freed}, tables now {after}"
        )
        assert freed is not None and freed >= 0
        vacuumed = _until(lambda: store.space().dead, lambda d: d.rows == 0)
        assert vacuumed.rows == 0 and vacuumed.bytes == 0, vacuumed
        assert [t.thread_id for t in store.list_threads()] == ["t9"]
        assert len(store.history("t9")) == STEPS
    finally:
        store.close()
