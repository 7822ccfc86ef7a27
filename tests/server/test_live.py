"""Live updates: a checkpoint committed by another connection (another process's, as far as
the store can tell) reaches an open SSE stream, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from plait import Command, PostgresCheckpointer, SqliteCheckpointer
from plait.server import StudioConfig, create_app
from plait.server.live import Watcher

from ._studio_support import LiveServer, compiled


def events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` pairs from an SSE stream's lines (comments skipped)."""
    name = None
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            yield name or "message", json.loads(line[6:])


def test_the_sqlite_watcher_wakes_on_a_commit_by_another_connection(db: str) -> None:
    async def go() -> None:
        reader, writer = SqliteCheckpointer(db), SqliteCheckpointer(db)
        watcher = Watcher(reader)
        assert watcher.mechanism == "sqlite data_version"
        seen = await watcher.wait(0, 10.0)  # the first poll reads the version, and wakes everyone
        quiet = await watcher.wait(seen, 3 * watcher.interval)
        assert quiet == seen  # nothing committed: no wake-up
        await compiled(writer).ainvoke(Command(resume="y"), thread_id="waiting")
        assert await watcher.wait(seen, 5.0) > seen
        await watcher.close()
        await reader.aclose()
        await writer.aclose()

    asyncio.run(go())


def test_waits_that_time_out_never_block_a_wake_up() -> None:
    """Streams wait with a timeout all the time; a wake-up must still get through at once
    (a Condition cancelled mid-wait can leave its lock taken on Python 3.11)."""
    from plait import MemoryCheckpointer

    async def go() -> None:
        watcher = Watcher(MemoryCheckpointer(), interval=3600)
        start = await watcher.wait(0, 0)
        waiters = [asyncio.create_task(watcher.wait(start, 0.001 * (i % 7))) for i in range(200)]
        await asyncio.gather(*waiters)
        patient = asyncio.create_task(watcher.wait(start, 30))
        await asyncio.sleep(0)
        await asyncio.wait_for(watcher.poke(), 1)
        assert await asyncio.wait_for(patient, 1) == start + 1
        await watcher.close()

    asyncio.run(go())


def _follow(server: LiveServer, path: str, change: Any, until: Any) -> list[Any]:
    """Open the stream, make ``change`` once the first event came, and read events until
    ``until(data)`` holds; returns every event's data."""
    seen: list[Any] = []
    with httpx.Client(timeout=15) as http, http.stream("GET", server.url + path) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for _, data in events(stream.iter_lines()):
            seen.append(data)
            if len(seen) == 1:
                change()
            elif until(data):
                return seen
    raise AssertionError(f"the stream ended before the change arrived: {seen}")


def _resumed_elsewhere(studio_store: Any, writer: Any, thread: str) -> list[Any]:
    """The events a Studio over ``studio_store`` streams for ``thread`` while ``writer`` (another
    connection) answers the thread's interrupt."""
    with LiveServer(create_app(studio_store, config=StudioConfig())) as server:
        seen = _follow(
            server,
            f"/api/threads/{thread}/events",
            lambda: compiled(writer).invoke(Command(resume="y"), thread_id=thread),
            lambda d: d.get("status") == "idle",
        )
    writer.close()
    studio_store.close()
    assert seen[0]["status"] == "interrupted" and seen[-1]["status"] == "idle"
    assert seen[-1]["checkpoint_id"] != seen[0]["checkpoint_id"]
    return seen


def test_a_thread_stream_shows_a_run_committed_elsewhere(db: str) -> None:
    _resumed_elsewhere(SqliteCheckpointer(db), SqliteCheckpointer(db), "waiting")


def test_the_thread_list_stream_shows_a_new_thread(db: str) -> None:
    studio_store = SqliteCheckpointer(db)
    with LiveServer(create_app(studio_store)) as server:
        writer = SqliteCheckpointer(db)
        seen = _follow(
            server,
            "/api/events",
            lambda: compiled(writer).invoke({"topic": "seas"}, thread_id="new"),
            lambda d: any(row[1] == "new" for row in d),
        )
        writer.close()
    assert all(row[1] != "new" for row in seen[0])
    studio_store.close()


def test_an_unknown_thread_has_no_stream(db: str) -> None:
    with LiveServer(create_app(SqliteCheckpointer(db))) as server:
        r = httpx.get(server.url + "/api/threads/nope/events", timeout=10)
    assert r.status_code == 404


@pytest.mark.postgres
def test_the_postgres_watcher_hears_a_commit_by_another_connection(postgres_dsn: str, postgres_schema: str) -> None:
    async def go() -> None:
        reader = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
        writer = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
        await reader.asetup()
        watcher = Watcher(reader)
        assert watcher.mechanism == "postgres listen/notify"
        await watcher.wait(0, 0)  # starts it
        await asyncio.wait_for(watcher.listening.wait(), 20)
        seen = await watcher.wait(0, 10.0)  # the wake-up for what came before LISTEN
        assert await watcher.wait(seen, 1.0) == seen  # no polling: quiet while nothing commits
        await compiled(writer).ainvoke({"topic": "x"}, thread_id="heard")
        assert await watcher.wait(seen, 10.0) > seen
        await watcher.close()
        await reader.aclose()
        await writer.aclose()

    asyncio.run(go())


@pytest.mark.postgres
def test_a_postgres_thread_stream_shows_a_run_committed_elsewhere(postgres_dsn: str, postgres_schema: str) -> None:
    seed = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
    compiled(seed).invoke({"topic": "x"}, thread_id="pg")
    seed.close()
    _resumed_elsewhere(
        PostgresCheckpointer(postgres_dsn, schema=postgres_schema),
        PostgresCheckpointer(postgres_dsn, schema=postgres_schema),
        "pg",
    )
