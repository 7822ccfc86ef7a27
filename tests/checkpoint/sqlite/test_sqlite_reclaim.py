"""How SQLite gives a sweep's space back: by full auto-vacuum for once (switching an
incremental file to full and back) when little of the file is free, by ``VACUUM`` when most
is; either way the file shrinks, stays in incremental mode and stays whole. A sweep's
batches run with ``secure_delete = FAST`` and a larger cache, and the connection gets its
settings back afterwards."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from plait.checkpoint.sqlite._store import SqliteCheckpointer
from plait.checkpoint.sqlite._worker import BULK_CACHE_KIB, bulk_transaction

from .._backend_helpers import append_chat

THREADS, STEPS = 10, 30


def _pragmas(db: Path) -> tuple[int, int, str]:
    with closing(sqlite3.connect(db)) as conn:
        ((mode,),) = conn.execute("PRAGMA auto_vacuum").fetchall()
        ((free,),) = conn.execute("PRAGMA freelist_count").fetchall()
        ((check,),) = conn.execute("PRAGMA integrity_check").fetchall()
    return int(mode), int(free), str(check)


@pytest.mark.parametrize("deleted", [2, THREADS - 1], ids=["little-free", "most-free"])
def test_reclaiming_shrinks_the_file_and_keeps_it_incremental(tmp_path: Path, deleted: int) -> None:
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as store:

        async def fill() -> None:
            for t in range(THREADS):
                await append_chat(store, f"t{t}", STEPS, size=800)

        asyncio.run(fill())
        store.reclaim_space()
        full = store.disk_bytes()
        kept = {f"t{t}": store.get(f"t{t}") for t in range(deleted, THREADS)}
        for t in range(deleted):
            store.delete_thread(f"t{t}")
        freed = store.reclaim_space()
        after = store.disk_bytes()
        assert full is not None and after is not None and freed is not None
        assert after < full * (1 - deleted / THREADS / 2), (full, after)
        assert {t: store.get(t) for t in kept} == kept
        assert store.list_threads()
    assert _pragmas(db) == (2, 0, "ok")  # incremental, no free page, whole


def test_a_bulk_transaction_gives_the_connection_its_settings_back(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "b.db", isolation_level=None)) as conn:
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA cache_size = -2000")
        seen = bulk_transaction(
            conn,
            lambda cur: (
                cur.execute("PRAGMA secure_delete").fetchone()[0],
                cur.execute("PRAGMA cache_size").fetchone()[0],
            ),
        )
        assert seen == (2, -BULK_CACHE_KIB)  # FAST
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -2000
        with pytest.raises(ZeroDivisionError):
            bulk_transaction(conn, lambda cur: 1 / 0)
        assert not conn.in_transaction
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
