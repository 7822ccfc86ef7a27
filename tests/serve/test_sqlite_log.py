"""The server's run log on SQLite: a run's insert carries its thread's tags and reads the
thread's active runs in the same transaction (and refuses to write under ``reject``); a saved
run's events follow its earlier ones; whether a thread is busy is read through the partial
index of active runs, whatever the thread's past."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

from plait.serve.records import RunRecord, ThreadRecord
from plait.serve.sqlite_log import _ACTIVE_SQL, _SCHEMA, SqliteRunLog


def _run(run_id: str, status: str = "pending", thread_id: str = "t") -> RunRecord:
    return RunRecord(run_id=run_id, thread_id=thread_id, assistant_id="a", graph="g", status=status)  # type: ignore[arg-type]


def test_an_insert_merges_the_threads_tags_and_returns_what_was_active(tmp_path: Path) -> None:
    async def go() -> None:
        log = SqliteRunLog(str(tmp_path / "s.db"))
        await log.open()
        try:
            await log.put_thread(ThreadRecord(thread_id="t", metadata={"user": "ann"}, created_at=1.0, updated_at=1.0))
            assert await log.insert_run(_run("r1"), tags={"graph_id": "g"}) == []
            thread = await log.get_thread("t")
            assert thread is not None and thread.metadata == {"user": "ann", "graph_id": "g"}
            active = await log.insert_run(_run("r2"))
            assert [r.run_id for r in active] == ["r1"]
            refused = await log.insert_run(_run("r3"), tags={"graph_id": "other"}, reject=True)
            assert [r.run_id for r in refused] == ["r1", "r2"]
            assert await log.get_run("r3") is None  # nothing written under reject
            thread = await log.get_thread("t")
            assert thread is not None and thread.metadata["graph_id"] == "g"
        finally:
            await log.close()

    asyncio.run(go())


def test_a_saved_runs_events_follow_its_earlier_ones_in_the_same_transaction(tmp_path: Path) -> None:
    async def go() -> None:
        log = SqliteRunLog(str(tmp_path / "s.db"))
        await log.open()
        try:
            run = _run("r1")
            await log.insert_run(run)
            assert await log.save_run(dataclasses.replace(run, status="running"), [("metadata", b"{}")]) == 1
            assert await log.append_events("r1", [("values", b"1"), ("values", b"2")], 2.0) == 3
            ended = dataclasses.replace(run, status="success", output={"n": 1}, updated_at=3.0)
            assert await log.save_run(ended, [("values", b"3")]) == 4
            assert await log.save_run(ended) == 0  # no events: nothing appended
            assert [(e.seq, e.event, e.data) for e in await log.read_events("r1", 0)] == [
                (1, "metadata", b"{}"), (2, "values", b"1"), (3, "values", b"2"), (4, "values", b"3"),
            ]  # fmt: skip
            stored = await log.get_run("r1")
            assert stored is not None and stored.status == "success" and stored.output == {"n": 1}
        finally:
            await log.close()

    asyncio.run(go())


def test_whether_a_thread_is_busy_is_read_through_the_index_of_active_runs() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(_SCHEMA)
        plan = " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + _ACTIVE_SQL, ("t",)))
        assert "plait_serve_runs_active" in plan, plan
    finally:
        conn.close()
