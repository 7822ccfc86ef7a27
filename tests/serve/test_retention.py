"""A run's stream events are kept ``event_ttl`` seconds after it ends, then dropped by the
sweep; an active run's and a recent run's stay. Driven by an injected clock."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from plait import END, START, AppendList, Graph, Retention, StateSchema
from plait.checkpoint import SqliteCheckpointer
from plait.serve.app import ServeConfig, create_app
from plait.serve.records import RunRecord
from plait.serve.retention import sweep_events
from plait.serve.sqlite_log import SqliteRunLog

from ._serve_support import APPS, served


def _run(run_id: str, status: str, ended: float) -> RunRecord:
    return RunRecord(
        run_id=run_id, thread_id="t", assistant_id="a", graph="g", status=status,  # type: ignore[arg-type]
        created_at=ended - 5, updated_at=ended,
    )  # fmt: skip


def test_events_of_runs_that_ended_longer_ago_than_the_ttl_are_dropped_and_no_others(tmp_path: Path) -> None:
    async def go() -> dict[str, int]:
        log = SqliteRunLog(str(tmp_path / "s.db"))
        await log.open()
        now = [10_000.0]
        for run in (_run("old", "success", 5_000), _run("recent", "error", 9_000), _run("active", "running", 1_000)):
            await log.insert_run(run)
            await log.append_events(run.run_id, [("metadata", b"{}"), ("values", b"{}")], run.updated_at)
        sweep = asyncio.get_running_loop().create_task(sweep_events(log, 3600, every=0.01, clock=lambda: now[0]))
        for _ in range(200):  # the first turn sweeps at once
            if not await log.read_events("old", 0):
                break
            await asyncio.sleep(0.01)
        left = {r: len(await log.read_events(r, 0)) for r in ("old", "recent", "active")}
        now[0] = 20_000.0  # an hour past "recent"'s end: the next turn drops it too
        for _ in range(200):
            if not await log.read_events("recent", 0):
                break
            await asyncio.sleep(0.01)
        left["recent later"] = len(await log.read_events("recent", 0))
        left["active later"] = len(await log.read_events("active", 0))
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep
        assert (await log.get_run("old")) is not None  # the run record stays: only its events go
        await log.close()
        return left

    assert asyncio.run(go()) == {"old": 0, "recent": 2, "active": 2, "recent later": 0, "active later": 2}


def test_the_server_sweeps_by_the_stored_retention_policy_from_its_start(tmp_path: Path) -> None:
    """``plait serve`` runs a retention sweeper (first turn at start); ``retention_sweep=0``
    runs none. The store's clock reads two days ahead, so the thread written now is idle."""
    path = tmp_path / "s.db"
    writer = SqliteCheckpointer(path)
    g = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("n", lambda s: {"log": ["n"]})
    app = g.add_edge(START, "n").add_edge("n", END).compile(writer)
    app.invoke({}, thread_id="old")
    writer.set_stored_retention(Retention(after=86400))
    writer.close()
    assert create_app(":memory:", {"g": app}, config=ServeConfig(retention_sweep=0)).state.retention_sweeper is None
    ahead = SqliteCheckpointer(path, clock=lambda: time.time() + 2 * 86400)
    try:
        with served(ahead, {"g": app}, config=ServeConfig(studio=False, retention_sweep=600)) as base:
            sweeper = APPS[base].state.retention_sweeper
            assert sweeper is not None and sweeper.interval == 600
            deadline = time.monotonic() + 30
            while sweeper.sweeps < 1:
                assert time.monotonic() < deadline, "the server never swept"
                time.sleep(0.01)
            assert sweeper.failures == 0 and sweeper.last_report.deleted == (("", "old"),)
        assert ahead.list_threads() == []
    finally:
        ahead.close()
