"""What a worker tells others and its log: the graphs and queues it serves, advertised while
it runs and withdrawn when it stops (what `plait submit` warns from), the mode keyword's two
spellings, and the wording of a rollback to a thread's start."""

from __future__ import annotations

import asyncio
import logging

import pytest

from plait.runs import Runs, WorkerSettings
from plait.runs.serving import LiveWorker, live_workers, unserved

from . import _run_flows as flows
from ._runs_support import FAST, worker_in_process
from .test_multitask import LONG, started_steps

pytestmark = pytest.mark.postgres


def test_a_worker_advertises_what_it_serves_until_it_stops(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    graphs = [flows.name("single"), flows.name("steps")]
    settings = WorkerSettings(**{**{f: getattr(FAST, f) for f in FAST.__slots__}, "queues": ("plait", "slow")})

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs:
            assert await live_workers(runs.db) == []
            async with worker_in_process(dsn, schema, graphs, settings=settings, name="w1"):
                found = await live_workers(runs.db)
                assert found == [LiveWorker("w1", tuple(graphs), ("plait", "slow"))]
                assert unserved(found, flows.name("single"), "slow") is None
                assert "serves graph 'other'" in (unserved(found, "other", "plait") or "")
            assert await live_workers(runs.db) == []

    asyncio.run(go())


def test_submit_takes_mode_or_stream_mode(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    with Runs(dsn, schema=schema) as runs:
        a = runs.submit(flows.name("single"), {}, mode="updates")
        b = runs.submit(flows.name("single"), {}, stream_mode="updates")
        c = runs.submit(flows.name("single"), {}, mode="updates", stream_mode="updates")
        assert len({a, b, c}) == 3
        with pytest.raises(TypeError, match="pass mode= or stream_mode=, not both, e.g. mode='values'"):
            runs.submit(flows.name("single"), {}, mode="values", stream_mode="updates")


def test_rolling_a_new_thread_back_says_it_went_back_to_its_start(
    runs_db: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    dsn, schema = runs_db
    caplog.set_level(logging.INFO, logger="plait.runs.worker")

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs, worker_in_process(dsn, schema):
            a = await runs.asubmit(flows.name("steps"), {**LONG, "tag": "a"}, thread_id="new", mode="events")
            await started_steps(runs, a, 2)
            b = await runs.asubmit(flows.name("steps"), {"steps": 1, "tag": "b"}, thread_id="new", multitask="rollback")
            assert (await runs.ajoin(b, timeout=20)).output["log"] == ["b:0"]

    asyncio.run(go())
    said = [r.getMessage() for r in caplog.records if "rolled thread" in r.getMessage()]
    assert len(said) == 1 and "rolled thread 'new' back to its start (the stopped run began the thread" in said[0]
    assert "None" not in said[0]
