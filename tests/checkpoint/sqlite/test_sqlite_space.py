"""SQLite gives the space of deleted and pruned checkpoints back: new files use incremental
vacuum, ``areclaim_space`` shrinks the file, and an older file is converted once by a full
``vacuum``. Sizes are the file and its log, as ``disk_bytes`` counts them."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

from plait.checkpoint.sqlite._store import SqliteCheckpointer

from .._backend_helpers import append_chat

THREADS, STEPS = 10, 50


def _mode(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        ((mode,),) = conn.execute("PRAGMA auto_vacuum").fetchall()
    return int(mode)


def _fill(store: SqliteCheckpointer) -> None:
    async def go() -> None:
        for t in range(THREADS):
            await append_chat(store, f"t{t}", STEPS, size=1000)

    asyncio.run(go())


def test_a_new_file_uses_incremental_vacuum(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with SqliteCheckpointer(db) as store:
        store.setup()
    assert _mode(db) == 2  # INCREMENTAL


def test_deleting_threads_then_reclaiming_shrinks_the_file(tmp_path: Path) -> None:
    """10 threads x 50 steps, 9 deleted: the freed pages are dead space until a reclaim,
    which gives them back and leaves the kept thread whole."""
    db = tmp_path / "s.db"
    with SqliteCheckpointer(db) as store:
        _fill(store)
        store.reclaim_space()  # an empty log: only the database is measured
        full = store.disk_bytes()
        kept = store.get("t9")
        for t in range(THREADS - 1):
            store.delete_thread(f"t{t}")
        dead = store.space().dead
        assert dead is not None and dead.bytes is not None and dead.bytes > full * 0.7, (dead, full)  # type: ignore[operator]
        freed = store.reclaim_space()
        after = store.disk_bytes()
        assert full is not None and after is not None and freed is not None
        print(f"sqlite {THREADS}x{STEPS}, delete {THREADS - 1}: {full} -> {after} bytes ({freed} freed)")
        assert after < full * 0.25, (full, after)
        assert freed > 0
        assert store.space().dead.bytes == 0  # type: ignore[union-attr]
        assert store.get("t9") == kept
        assert [t.thread_id for t in store.list_threads()] == ["t9"]
        asyncio.run(append_chat(store, "again", 3))  # and the store goes on
    with SqliteCheckpointer(db) as reopened:
        assert reopened.get("t9") == kept and len(reopened.history("again")) == 3


def test_pruning_then_reclaiming_shrinks_the_file(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    with SqliteCheckpointer(db) as store:
        _fill(store)
        store.reclaim_space()
        full = store.disk_bytes()
        heads = {f"t{t}": store.get(f"t{t}").values for t in range(THREADS)}  # type: ignore[union-attr]
        for t in range(THREADS):
            store.prune(f"t{t}", keep_last=1)
        freed = store.reclaim_space()
        after = store.disk_bytes()
        assert full is not None and after is not None and freed is not None
        print(f"sqlite {THREADS}x{STEPS}, prune keep_last=1: {full} -> {after} bytes ({freed} freed)")
        assert after < full * 0.7, (full, after)  # the heads keep their whole chats
        assert {k: store.get(k).values for k in heads} == heads  # type: ignore[union-attr]  # now roots


def test_an_older_file_gives_nothing_back_until_one_full_vacuum_converts_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with SqliteCheckpointer(db) as store:
        _fill(store)
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:  # as plait made files before
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
    assert _mode(db) == 0
    with SqliteCheckpointer(db) as store:
        for t in range(5):
            store.delete_thread(f"t{t}")
        store.reclaim_space()
        before = store.disk_bytes()
        assert store.reclaim_space() == 0  # incremental vacuum is off in this file
        dead = store.space().dead
        assert dead is not None and dead.bytes and "plait db vacuum" in dead.reclaim
        freed = store.vacuum()  # the one-time conversion
        assert _mode(db) == 2
        after = store.disk_bytes()
        assert before is not None and after is not None and freed == before - after and after < before * 0.7
        store.delete_thread("t5")
        shrunk = store.disk_bytes()
        assert store.reclaim_space() and store.disk_bytes() < shrunk  # type: ignore[operator]
        assert len(store.list_threads()) == 4
