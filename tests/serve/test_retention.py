"""A run's stream events are kept ``event_ttl`` seconds after it ends, then dropped by the
sweep; an active run's and a recent run's stay. Driven by an injected clock."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from plait.serve.records import RunRecord
from plait.serve.retention import sweep_events
from plait.serve.sqlite_log import SqliteRunLog


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
