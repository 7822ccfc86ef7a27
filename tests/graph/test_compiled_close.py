"""``CompiledGraph.close()`` and ``with`` / ``async with``: a closed graph's SQLite file holds
every thread by itself (its write-ahead log folded in), so copying the file alone is enough."""

from __future__ import annotations

import asyncio
import pathlib
import shutil

from plait import END, START, Graph, SqliteCheckpointer, StateSchema


def graph() -> Graph:
    g = Graph(StateSchema.builder().add_lww("n").build())
    g.add_node("inc", lambda s: {"n": s["n"] + 1}).add_edge(START, "inc").add_edge("inc", END)
    return g


def threads_in_a_copy_of(db: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    """The threads a copy of ``db`` alone (no -wal, no -shm beside it) shows."""
    copy = tmp / "copy" / "plait.db"
    copy.parent.mkdir()
    shutil.copy(db, copy)
    with SqliteCheckpointer(copy) as store:
        return [t.thread_id for t in store.list_threads()]


def test_with_closes_the_store_and_folds_the_log_into_the_file(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "plait.db"
    with graph().compile(checkpointer=str(db)) as app:
        assert app.invoke({"n": 0}, thread_id="t")["n"] == 1
        assert pathlib.Path(f"{db}-wal").exists()  # the commits sit in the log while open
    assert not pathlib.Path(f"{db}-wal").exists()
    assert threads_in_a_copy_of(db, tmp_path) == ["t"]
    app.close()  # idempotent


def test_close_closes_a_checkpointer_it_was_given(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "plait.db"
    app = graph().compile(checkpointer=SqliteCheckpointer(db))
    app.invoke({"n": 41}, thread_id="given")
    app.close()
    assert not pathlib.Path(f"{db}-wal").exists()
    assert threads_in_a_copy_of(db, tmp_path) == ["given"]


def test_async_with_closes_the_store(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "plait.db"

    async def main() -> int:
        async with graph().compile(checkpointer=str(db)) as app:
            out = await app.ainvoke({"n": 1}, thread_id="a")
            return int(out["n"])

    assert asyncio.run(main()) == 2
    assert not pathlib.Path(f"{db}-wal").exists()
    assert threads_in_a_copy_of(db, tmp_path) == ["a"]


def test_a_graph_without_a_store_closes_too() -> None:
    with graph().compile() as app:
        assert app.invoke({"n": 1})["n"] == 2
