"""The change feed (``Checkpointer.achanges``) on every backend: a change made by another
checkpointer, or another process, on the same store wakes the feed with its thread; none is
lost; closing the feed releases what it watched with.

Every wait is for an event (a record, a connection gone) with a generous deadline, never a
fixed sleep: CI is a busy two-core machine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import plait.checkpoint
from plait.checkpoint.base import Capabilities, Checkpointer
from plait.checkpoint.feed import ChangeFeed, RowTracker, ThreadChange
from plait.checkpoint.memory import MemoryCheckpointer
from plait.checkpoint.model import WritesBatch
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.checkpoint.sqlite import SqliteCheckpointer

from ._backend_helpers import make

WAIT = 30.0
"""Seconds a test waits for what must come (a record, a closed connection)."""
FAST = 0.05
"""The feeds' poll interval in these tests."""

MakeSaver = Callable[..., Checkpointer]


def change(thread: str, namespace: str = "") -> ThreadChange:
    return ThreadChange(namespace=namespace, thread_id=thread)


async def seen_until(feed: ChangeFeed, wanted: set[ThreadChange]) -> set[ThreadChange]:
    """Records until every one of ``wanted`` came (or fail after :data:`WAIT`); all seen."""
    seen: set[ThreadChange] = set()
    deadline = time.monotonic() + WAIT
    while not wanted <= seen:
        left = deadline - time.monotonic()
        got = await feed.next(left) if left > 0 else None
        assert got is not None, f"the feed never reported {sorted(map(str, wanted - seen))}; it reported {seen}"
        seen.add(got)
    return seen


async def started(cp: Checkpointer, **kwargs: Any) -> ChangeFeed:
    feed = cp.achanges(interval=FAST, **kwargs)
    await asyncio.wait_for(feed.start(), WAIT)
    assert feed.ready.is_set()
    return feed


async def pair(make_saver: MakeSaver) -> tuple[Checkpointer, Checkpointer]:
    """A reader and a writer on one store (the same object for memory, which shares nothing)."""
    reader = make_saver()
    writer = reader if isinstance(reader, MemoryCheckpointer) else make_saver()
    await writer.asetup()
    await reader.asetup()
    await writer.acommit(checkpoints=[make("before", None, {"x": 0})])  # a store with a thread
    return reader, writer


def test_every_backend_says_it_has_a_feed_and_the_protocol_default_polls() -> None:
    assert Capabilities().change_feed is False
    for cls in (MemoryCheckpointer, SqliteCheckpointer, PostgresCheckpointer, plait.checkpoint.FileCheckpointer):
        assert cls.capabilities.change_feed, cls


def test_a_commit_by_another_checkpointer_wakes_the_feed_with_its_thread(make_saver: MakeSaver) -> None:
    async def go() -> None:
        reader, writer = await pair(make_saver)
        async with await started(reader) as feed:
            assert feed.mechanism != "polling"
            await writer.acommit(checkpoints=[make("t1", None, {"x": 1}, namespace="ns")])
            assert change("t1", "ns") in await seen_until(feed, {change("t1", "ns")})

    asyncio.run(go())


def test_no_change_is_lost_between_two_commits(make_saver: MakeSaver) -> None:
    """Two commits back to back, a pending write, a lease taken and given back, a delete: each
    is reported, also when the consumer was not waiting while it happened."""

    async def go() -> None:
        reader, writer = await pair(make_saver)
        async with await started(reader, namespace="") as feed:
            a = make("a", None, {"x": 1})
            await writer.acommit(checkpoints=[a])
            await writer.acommit(checkpoints=[make("b", None, {"x": 1})])
            await seen_until(feed, {change("a"), change("b")})
            lease = await writer.atake_lease("a", "runner")
            await seen_until(feed, {change("a")})
            batch = WritesBatch(thread_id="a", namespace="", checkpoint_id=a.checkpoint.id, writes=())
            await writer.acommit(writes=[batch], checkpoints=[make("a", a.checkpoint, {"x": 2})])
            await seen_until(feed, {change("a")})
            await writer.arelease_lease(lease)
            await seen_until(feed, {change("a")})
            await writer.adelete_thread("b")
            await seen_until(feed, {change("b")})
            await writer.acommit(checkpoints=[make("a", None, {"x": 3}, namespace="other")])
            await writer.acommit(checkpoints=[make("c", None, {"x": 3})])
            assert change("a", "other") not in await seen_until(feed, {change("c")})  # namespace "" only

    asyncio.run(go())


def test_a_thread_feed_reports_that_thread_only(make_saver: MakeSaver) -> None:
    async def go() -> None:
        reader, writer = await pair(make_saver)
        async with await started(reader, thread_id="mine") as feed:
            await writer.acommit(checkpoints=[make("other", None, {"x": 1})])
            await writer.acommit(checkpoints=[make("mine", None, {"x": 1})])
            assert await seen_until(feed, {change("mine")}) == {change("mine")}

    asyncio.run(go())


def test_a_timed_out_wait_loses_nothing(make_saver: MakeSaver) -> None:
    async def go() -> None:
        reader, writer = await pair(make_saver)
        async with await started(reader) as feed:
            while await feed.next(0.01) is not None:  # until a wait times out (its wait is cancelled)
                pass
            await writer.acommit(checkpoints=[make("late", None, {"x": 1})])
            await seen_until(feed, {change("late")})

    asyncio.run(go())


def test_closing_the_feed_ends_it(make_saver: MakeSaver) -> None:
    async def go() -> None:
        reader, writer = await pair(make_saver)
        feed = await started(reader)
        await feed.aclose()
        await writer.acommit(checkpoints=[make("after", None, {"x": 1})])
        assert await feed.next(1.0) is None
        assert [c async for c in feed] == []

    asyncio.run(go())


# -- another process -------------------------------------------------------------------------

_CHILD = """
import sys, json
import plait.checkpoint
from plait import END, START, Graph, StateSchema

store = plait.checkpoint.open(sys.argv[1], **json.loads(sys.argv[2]))
graph = Graph(StateSchema.builder().add_lww("x").build())
graph.add_node("n", lambda state: {"x": 2}).add_edge(START, "n").add_edge("n", END)
graph.compile(checkpointer=store).invoke({"x": 1}, thread_id=sys.argv[3])
store.close()
"""


def test_a_run_in_another_process_wakes_the_feed(make_saver: MakeSaver) -> None:
    """The other process opens the store from the feed's checkpointer's address."""

    async def go() -> None:
        reader = make_saver()
        if isinstance(reader, MemoryCheckpointer):
            assert reader.address is None
            return
        await reader.asetup()
        assert reader.address is not None
        args = [sys.executable, "-c", _CHILD, reader.address, __import__("json").dumps(dict(reader.address_options))]
        async with await started(reader, thread_id="elsewhere") as feed:
            child = await asyncio.create_subprocess_exec(*args, "elsewhere", stderr=subprocess.PIPE)
            _, err = await asyncio.wait_for(child.communicate(), 120)
            assert child.returncode == 0, err.decode()
            await seen_until(feed, {change("elsewhere")})
        assert (await reader.aget_thread("elsewhere")) is not None

    asyncio.run(go())


def test_the_address_opens_the_same_store(make_saver: MakeSaver) -> None:
    async def go() -> None:
        cp = make_saver()
        await cp.asetup()
        await cp.acommit(checkpoints=[make("kept", None, {"x": 1})])
        if cp.address is None:
            assert isinstance(cp, MemoryCheckpointer)
            return
        again = plait.checkpoint.open(cp.address, create=False, **cp.address_options)
        try:
            assert type(again) is type(cp)
            assert [t.thread_id for t in await again.alist_threads()] == ["kept"]
        finally:
            await again.aclose()

    asyncio.run(go())


# -- releasing what a feed holds ---------------------------------------------------------------


def _fds_on(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path`` (Linux)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_closing_a_sqlite_feed_closes_its_connection(tmp_path: Path) -> None:
    path = tmp_path / "feed.db"

    async def go() -> None:
        cp = SqliteCheckpointer(path)
        await cp.asetup()
        before = _fds_on(path)
        feed = await started(cp)
        assert feed.mechanism == "sqlite data_version"
        assert _fds_on(path) == before + 1
        await cp.aclose()
        # SQLite keeps a closed connection's descriptor while another connection of the
        # process holds a lock on the file, so only closing both shows that none is left.
        await feed.aclose()
        assert _fds_on(path) == 0

    asyncio.run(go())


def _feed_connections(dsn: str, schema: str) -> int:
    """Connections of a change feed whose last query read ``schema``'s thread rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'plait change feed' "
            "AND position(%s in query) > 0",
            (f'"{schema}".plait_threads',),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.postgres
def test_closing_a_postgres_feed_closes_its_connection(postgres_dsn: str, postgres_schema: str) -> None:
    async def go() -> None:
        cp = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
        await cp.asetup()
        feed = await started(cp)
        assert feed.mechanism == "postgres listen/notify"
        assert _feed_connections(postgres_dsn, postgres_schema) == 1
        await feed.aclose()
        deadline = time.monotonic() + WAIT  # the server ends the backend after the client left
        while _feed_connections(postgres_dsn, postgres_schema) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert _feed_connections(postgres_dsn, postgres_schema) == 0
        await cp.aclose()

    asyncio.run(go())


@pytest.mark.postgres
def test_a_role_that_may_not_add_the_trigger_polls_and_says_why(
    postgres_dsn: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    role = f"plait_feed_{uuid.uuid4().hex[:10]}"
    owner = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
    owner.setup()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA "{postgres_schema}" TO "{role}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{postgres_schema}" TO "{role}"')
    limited = make_conninfo(postgres_dsn, user=role)

    async def go() -> None:
        reader = PostgresCheckpointer(limited, schema=postgres_schema)
        with caplog.at_level(logging.WARNING, logger="plait.checkpoint.postgres"):
            async with await started(reader) as feed:
                assert feed.mechanism == "polling"
                await owner.acommit(checkpoints=[make("polled", None, {"x": 1})])
                await seen_until(feed, {change("polled")})
        assert any("change notices unavailable" in r.getMessage() for r in caplog.records)
        await reader.aclose()

    try:
        asyncio.run(go())
    finally:
        owner.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


# -- the fallback, and how rows are told apart -----------------------------------------------------


def test_a_store_without_a_feed_of_its_own_polls_its_listing() -> None:
    """The protocol's default (here an in-memory SQLite database, which no other connection
    sees) reports commits, leases and deletes by comparing listings."""

    async def go() -> None:
        cp = SqliteCheckpointer(":memory:")
        await cp.asetup()
        await cp.acommit(checkpoints=[make("gone", None, {"x": 1})])
        async with await started(cp) as feed:
            assert feed.mechanism == "polling"
            await cp.acommit(checkpoints=[make("new", None, {"x": 1})])
            await cp.adelete_thread("gone")
            await seen_until(feed, {change("new"), change("gone")})
        await cp.aclose()

    asyncio.run(go())


def test_rows_are_reported_when_they_move_or_while_held() -> None:
    rows = RowTracker(slack=10.0)
    first = [("", "a", 1, 0, "idle", 100.0, "c1"), ("", "b", 2, 1, "idle", 50.0, "c1")]
    assert rows.look(first) == []  # the first look records only
    assert rows.since == 90.0
    assert rows.look(first) == [change("b")]  # held: its pending writes move nothing
    late = ("", "c", 1, 0, "idle", 95.0, "c1")  # stamped before a: committed after it
    moved = ("", "a", 1, 0, "idle", 100.0, "c2")  # the same time, a new head
    assert rows.look([moved, late]) == [change("a"), change("c")]
    assert rows.look([moved, late]) == []


@pytest.mark.parametrize("module", ["plait.server.live", "plait.server.queue", "plait.cli.watch"])
def test_the_feeds_users_name_no_backend(module: str) -> None:
    """They reach the feed and the store's address through the protocol: no backend module
    imported, no backend class named, no private attribute of a store read."""
    import ast
    import importlib

    source = Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8")
    tree = ast.parse(source)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    backends = ("memory", "file", "sqlite", "postgres")
    assert not {m for m in imported if m and m.startswith("plait.checkpoint.") and m.split(".")[2] in backends}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for cls in ("MemoryCheckpointer", "FileCheckpointer", "SqliteCheckpointer", "PostgresCheckpointer"):
        assert cls not in names and cls not in strings, cls
    assert not {n for n in names if n in ("_conninfo", "_pool")}  # what server/pg_notify.py read
