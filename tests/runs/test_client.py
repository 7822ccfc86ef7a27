"""Submitting, reading, listing, waiting for and cancelling runs, with one worker in this process."""

from __future__ import annotations

import asyncio

import _run_flows as flows
import pytest
from _runs_support import worker_in_process

from plait.runs import Runs

pytestmark = pytest.mark.postgres


def test_a_submitted_run_is_run_by_the_worker_and_ends_success_with_its_output(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs, worker_in_process(dsn, schema):
            run_id = await runs.asubmit(flows.name("steps"), {"steps": 3, "tag": "a"}, thread_id="t1")
            run = await runs.await_run(run_id, timeout=20)
            assert run.status == "success", run
            assert run.output["log"] == ["a:0", "a:1", "a:2"]
            assert run.attempts == 1 and run.worker is not None and run.started_at is not None
            assert (await runs.aget(run_id)).status == "success"
            listed = await runs.alist(thread_id="t1")
            assert [r.run_id for r in listed] == [run_id]

    asyncio.run(go())
