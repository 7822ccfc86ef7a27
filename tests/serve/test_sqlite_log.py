"""The server's run log on SQLite: a run's insert carries its thread's tags and reads the
thread's active runs in the same transaction (and refuses to write under ``reject``); a saved
run's events follow its earlier ones; whether a thread is busy is read through the partial
index of active runs, whatever the thread's past."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

from plait.serve.records import RunRecord, StoredEvent, ThreadRecord
from plait.serve.sqlite_log import _ACTIVE_SQL, _SCHEMA, SqliteRunLog
from plait.serve.streams import EventWriter, Notifier, follow


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


def test_a_follower_gets_every_event_once_in_order_and_a_handed_batch_is_not_read_back(tmp_path: Path) -> None:
    """A batch handed over by the notice that wakes a waiting reader is sent as it is (the
    first event of a stream waits for one commit, not a commit and a read); a reader that fell
    behind reads the log instead: either way every event comes once, in order."""

    class CountingLog(SqliteRunLog):
        reads = 0

        async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
            self.reads += 1
            return await super().read_events(run_id, after, limit)

    async def go() -> tuple[list[int], int]:
        log = CountingLog(str(tmp_path / "s.db"))
        await log.open()
        notifier = Notifier()
        active = [True]
        reads_at_first: list[int] = []

        async def is_active() -> bool:
            return active[0]

        try:
            await log.insert_run(_run("r1", "running"))
            writer = EventWriter(log, "r1", notifier)
            got: list[int] = []

            async def read() -> None:
                async for event in follow(log, notifier, "r1", 0, is_active, heartbeat=5.0):
                    assert event is not None
                    if not got:
                        reads_at_first.append(log.reads)
                    got.append(event.seq)
                    if event.seq % 17 == 0:
                        await asyncio.sleep(0.01)  # falls behind now and then

            reader = asyncio.get_running_loop().create_task(read())
            while log.reads == 0 or notifier.waiters.get("r1") is None:  # it read nothing and waits
                await asyncio.sleep(0.001)
            for i in range(120):
                writer.add("values", {"i": i})
                if i % 3 == 2:
                    await writer.flush()
                    await asyncio.sleep(0.002)
            active[0] = False
            notifier.notify("r1")
            await asyncio.wait_for(reader, 30)
            return got, reads_at_first[0]
        finally:
            await log.close()

    got, reads_at_first = asyncio.run(go())
    assert got == list(range(1, 121))
    assert reads_at_first == 1  # only the read that found nothing: the first batch came with its notice
