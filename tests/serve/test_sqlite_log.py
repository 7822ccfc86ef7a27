"""The server's run log on SQLite: a run's insert carries its thread's tags and reads the
thread's active runs in the same transaction (and refuses to write under ``reject``); a saved
run's events follow its earlier ones; whether a thread is busy is read through the partial
index of active runs, whatever the thread's past."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from plait.serve.records import RunRecord, StoredEvent, ThreadRecord
from plait.serve.sqlite_log import _ACTIVE_SQL, _SCHEMA, SqliteRunLog
from plait.serve.streams import EventWriter, Notifier, follow


def _run(run_id: str, status: str = "pending", thread_id: str = "t") -> RunRecord:
    return RunRecord(run_id=run_id, thread_id=thread_id, assistant_id="a", graph="g", status=status)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def _running(path: Path, log_type: type[SqliteRunLog] = SqliteRunLog) -> AsyncIterator[tuple[Any, EventWriter]]:
    """A log with a running run ``r1`` and the run's event writer."""
    log = log_type(str(path))
    await log.open()
    try:
        await log.insert_run(_run("r1", "running"))
        yield log, EventWriter(log, "r1", Notifier())
    finally:
        await log.close()


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


def test_a_streamed_chunk_is_stored_before_append_events_now_returns_when_the_file_is_free(tmp_path: Path) -> None:
    """The first chunk of an answer is stored on the caller's thread (no hop to the log's
    thread) when the file's write lock is free, and handed to the log's thread when another
    connection holds it: stored once the lock is given back, with the next number."""

    async def go() -> None:
        path = tmp_path / "s.db"
        log = SqliteRunLog(str(path))
        await log.open()
        other = sqlite3.connect(path, isolation_level=None)
        try:
            await log.insert_run(_run("r1", "running"))
            assert log.append_events_now("r1", [("messages", b"[1]")], 1.0) == 1
            assert log.conn is not None and log.conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (1000,)
            other.execute("BEGIN IMMEDIATE")  # another writer (the checkpointer) holds the file
            pending = log.append_events_now("r1", [("messages", b"[2]"), ("messages", b"[3]")], 2.0)
            assert not isinstance(pending, int)
            await asyncio.sleep(0.05)
            assert other.execute("SELECT seq FROM plait_serve_events").fetchall() == [(1,)]  # it waits
            other.execute("COMMIT")
            assert await pending == 3
            assert [(e.seq, e.data) for e in await log.read_events("r1", 0)] == [(1, b"[1]"), (2, b"[2]"), (3, b"[3]")]
        finally:
            other.close()
            await log.close()

    asyncio.run(go())


def test_an_answers_first_chunk_wakes_its_readers_at_once_and_the_rest_follow_in_one_batch(tmp_path: Path) -> None:
    """A burst of chunks (a node that yields its deltas without awaiting): the first is stored
    and handed to a waiting reader before the writer's ``add`` returns; the chunks added in the
    same turn after it are stored together in one transaction; every event comes once, in order."""

    class CountingLog(SqliteRunLog):
        appends = 0

        async def append_events(self, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int:
            self.appends += 1
            return await super().append_events(run_id, events, now)

    async def go() -> None:
        async with _running(tmp_path / "s.db", CountingLog) as (log, writer):
            await log.append_events("r1", [("metadata", b"{}")], 1.0)  # opens the log's connection
            log.appends = 0
            woken = writer.notifier.register("r1")
            for i in range(20):
                writer.add("messages", [{"content": str(i)}, {}])
                if i == 0:
                    assert woken.done()  # stored, and its reader told, before the turn ends
                    assert [e.seq for e in woken.result()] == [2]
            await writer.flush()
            assert log.appends == 1  # the nineteen others: one transaction
            events = await log.read_events("r1", 0)
            assert [e.seq for e in events] == list(range(1, 22))
            assert [e.event for e in events[1:]] == ["messages"] * 20

    asyncio.run(go())


def test_the_logs_thread_ends_with_it_and_a_closed_log_refuses_work(tmp_path: Path) -> None:
    async def go() -> None:
        log = SqliteRunLog(str(tmp_path / "s.db"))
        await log.open()
        thread = log.thread
        assert thread is not None and thread.is_alive()
        await log.insert_run(_run("r1"))
        await log.close()
        assert not thread.is_alive()
        try:
            await log.get_run("r1")
        except RuntimeError as exc:
            assert "closed" in str(exc)
        else:
            raise AssertionError("a closed log ran a job")

    asyncio.run(go())


def test_events_nobody_reads_wait_for_the_step_or_the_end_and_a_reader_that_comes_has_them_stored(
    tmp_path: Path,
) -> None:
    """A run whose client only waits for its result stores its events at the next super-step
    or with its end (one transaction fewer a run); a stream that starts reading meanwhile has
    what is queued stored at once and gets every event once, in order."""

    async def go() -> None:
        async with _running(tmp_path / "s.db") as (log, writer):
            notifier = writer.notifier
            writer.add("values", {"i": 1})
            writer.add("updates", {"i": 2})
            await asyncio.sleep(0.05)
            assert await log.read_events("r1", 0) == []  # nobody reads: not stored yet
            await writer.flush()  # a super-step's boundary
            assert [e.seq for e in await log.read_events("r1", 0)] == [1, 2]
            writer.add("values", {"i": 3})
            active = [True]

            async def is_active() -> bool:
                return active[0]

            got: list[int] = []

            async def read() -> None:
                async with contextlib.aclosing(follow(log, notifier, "r1", 0, is_active, heartbeat=5.0)) as events:
                    async for event in events:
                        assert event is not None
                        got.append(event.seq)
                        if event.seq == 3:
                            return

            await asyncio.wait_for(read(), 10)  # event 3 stored because the reader came
            assert got == [1, 2, 3] and notifier.readers == {}
            writer.add("values", {"i": 4})
            assert await writer.drain() != []  # the last, stored with the run's end

    asyncio.run(go())
