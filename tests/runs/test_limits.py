"""Flow control across workers: a graph's concurrency limit and start rate are never exceeded."""

from __future__ import annotations

import asyncio

import pytest

from plait.runs import Run, Runs

from . import _run_flows as flows
from ._runs_support import worker_in_process

pytestmark = pytest.mark.postgres


def most_at_once(runs: list[Run]) -> int:
    """The most runs whose [started_at, finished_at] overlap at any moment."""
    edges = sorted([(r.started_at or 0, 1) for r in runs] + [(r.finished_at or 0, -1) for r in runs])
    most = now = 0
    for _, delta in edges:
        now += delta
        most = max(most, now)
    return most


def test_max_running_holds_across_two_workers(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs:
            await runs.aset_limit(flows.name("steps"), max_running=2)
            ids = [
                await runs.asubmit(flows.name("steps"), {"steps": 2, "pause": 0.05, "tag": "m"}, thread_id=f"m{i}")
                for i in range(8)
            ]
            async with worker_in_process(dsn, schema, name="w1"), worker_in_process(dsn, schema, name="w2"):
                sampled = 0
                while True:
                    listed = await runs.alist(graph=flows.name("steps"))
                    sampled = max(sampled, sum(r.status == "running" for r in listed))
                    if all(r.done for r in listed):
                        break
                    await asyncio.sleep(0.003)
            done = [await runs.aget(i) for i in ids]
        assert all(r.status == "success" for r in done)
        assert sampled <= 2 and most_at_once(done) == 2
        assert {r.worker.split("/")[0] for r in done if r.worker} == {"w1", "w2"}

    asyncio.run(go())


def test_the_start_rate_holds_over_every_window(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    rate, burst = 8.0, 2.0

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs:
            await runs.aset_limit(flows.name("single"), starts_per_second=rate, burst=burst)
            ids = [await runs.asubmit(flows.name("single"), {}, thread_id=f"s{i}") for i in range(10)]
            async with worker_in_process(dsn, schema):
                done = [await runs.ajoin(i, timeout=30) for i in ids]
            # lifting the limit lets runs start at once again
            await runs.aset_limit(flows.name("single"))
        assert all(r.status == "success" for r in done)
        starts = sorted(r.started_at or 0 for r in done)
        slack = 0.03  # started_at is written just after the token is taken
        for i in range(len(starts)):
            for j in range(i + 1, len(starts)):
                assert j - i + 1 <= burst + rate * (starts[j] - starts[i] + slack), (i, j, starts)
        assert starts[-1] - starts[0] >= (len(starts) - burst) / rate - slack  # the limit did slow them

    asyncio.run(go())


def test_limits_are_checked(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs:
            with pytest.raises(ValueError, match="max_running"):
                await runs.aset_limit("g", max_running=0)
            with pytest.raises(ValueError, match="starts_per_second"):
                await runs.aset_limit("g", starts_per_second=-1)

    asyncio.run(go())
