"""The retention sweeper (what ``plait worker`` and ``plait serve`` run) sweeps by the policy in
effect at start and after each interval, picks up a policy stored meanwhile, keeps going after
a failed turn, and on PostgreSQL counts the turns another process's sweep held the lock:
driven by a sleep the test releases and a store clock it moves, never by the wall clock."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import pytest

from plait import END, START, AppendList, Checkpointer, Graph, Retention, StateSchema
from plait.checkpoint import PostgresCheckpointer, SqliteCheckpointer
from plait.checkpoint.sweeper import RetentionSweeper

from ..store.test_sweeper import Gate


class Clock:
    """The store's clock, starting at the wall clock's now and moved by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def _write(cp: Checkpointer, *thread_ids: str) -> None:
    g = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("n", lambda s: {"log": ["n"]})
    app = g.add_edge(START, "n").add_edge("n", END).compile(cp)
    for tid in thread_ids:
        await app.ainvoke({}, thread_id=tid)


def test_it_sweeps_by_the_policy_in_effect_at_each_turn(make_saver: Callable[..., Checkpointer]) -> None:
    clock = Clock()
    cp = make_saver()
    cp.clock = clock  # type: ignore[attr-defined]  # the store's clock: what idleness is measured by

    async def go() -> None:
        await _write(cp, "a", "b")
        gate = Gate()
        sweeper = RetentionSweeper(cp, every=600, sleep=gate.sleep)
        async with sweeper:
            seconds, release = await gate.next()  # the first turn ran at start: no policy, nothing went
            assert seconds == 600 and sweeper.sweeps == 1 and sweeper.last_report is not None
            assert sweeper.last_report.deleted == () and sweeper.last_report.policy is None
            await cp.aset_stored_retention(Retention(after=3600))  # stored by another process meanwhile
            clock.now += 2 * 3600
            release.set_result(None)
            _, release = await gate.next()
            report = sweeper.last_report
            assert report is not None and {tid for _, tid in report.deleted} == {"a", "b"}
            assert await cp.alist_threads() == []
        assert not sweeper.running

    asyncio.run(go())


def test_a_failed_turn_is_logged_and_the_next_one_runs(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "p.db"
    cp = SqliteCheckpointer(path)
    cp.set_stored_retention(Retention(after=60))
    conn = sqlite3.connect(path)  # closed here: `with` only commits
    with conn:
        conn.execute("UPDATE plait_retention_policy SET policy = '{\"after\": 0}'")
    conn.close()

    async def go() -> None:
        gate = Gate()
        async with RetentionSweeper(cp, every=5, sleep=gate.sleep) as sweeper:
            _, release = await gate.next()
            assert (sweeper.sweeps, sweeper.failures) == (1, 1)
            assert "plait db retention --off" in str(sweeper.last_error)
            await cp.aclear_stored_retention()
            release.set_result(None)
            await gate.next()
            assert (sweeper.sweeps, sweeper.failures, sweeper.last_error) == (2, 1, None)

    with caplog.at_level(logging.WARNING, logger="plait.checkpoint.retention"):
        asyncio.run(go())
    cp.close()
    assert "the retention sweep of" in caplog.text and "trying again in 5 seconds" in caplog.text


def test_it_refuses_an_interval_that_is_not_positive() -> None:
    cp = SqliteCheckpointer(":memory:")
    try:
        with pytest.raises(ValueError, match="every=0"):
            RetentionSweeper(cp, every=0)
    finally:
        cp.close()


@pytest.mark.postgres
def test_on_postgres_a_turn_that_finds_another_sweeping_changes_nothing(
    postgres_dsn: str, postgres_schema: str
) -> None:
    clock = Clock()

    async def go() -> None:
        first = PostgresCheckpointer(postgres_dsn, schema=postgres_schema, clock=clock)
        second = PostgresCheckpointer(postgres_dsn, schema=postgres_schema, clock=clock)
        try:
            await first.asetup()
            await _write(first, "t")
            await first.aset_stored_retention(Retention(after=60))
            clock.now += 3600
            gate = Gate()
            async with first._sweep_lock() as held:  # another process's sweep, on its own connection
                assert held
                async with RetentionSweeper(second, every=60, sleep=gate.sleep) as sweeper:
                    _, release = await gate.next()
                    assert (sweeper.held_elsewhere, sweeper.failures) == (1, 0)
                    assert [t.thread_id for t in await second.alist_threads()] == ["t"]
                    await sweeper.astop()
            async with RetentionSweeper(second, every=60, sleep=gate.sleep) as sweeper:
                await gate.next()
                assert sweeper.held_elsewhere == 0 and sweeper.last_report is not None
                assert sweeper.last_report.deleted == (("", "t"),)
        finally:
            await first.aclose()
            await second.aclose()

    asyncio.run(go())


def test_each_turn_removes_the_node_caches_expired_entries(tmp_path: Any) -> None:
    clock = Clock()
    cp = SqliteCheckpointer(tmp_path / "c.db", clock=clock)

    async def go() -> None:
        await cp.cache.aset("node:n", "old", "1", 60)
        await cp.cache.aset("node:n", "kept", "2", None)
        gate = Gate()
        sweeper = RetentionSweeper(cp, every=600, sleep=gate.sleep)
        async with sweeper:
            _, release = await gate.next()
            assert sweeper.cache_swept == 0
            clock.now += 61
            release.set_result(None)
            _, release = await gate.next()
            assert sweeper.cache_swept == 1
            assert await cp.cache.aget("node:n", "kept") == "2"
            release.set_result(None)
        await cp.aclose()

    asyncio.run(go())
