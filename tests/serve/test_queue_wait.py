"""``runs.wait`` on PostgreSQL: the server hears of a run's events and of its end from the
database's notifications; a wait reads the run again only once its end was heard, not at every
batch of events a worker announces (ten steps: a dozen announcements, one read)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk import get_sync_client

from plait.checkpoint import open as open_store
from plait.serve.app import ServeConfig

from ._serve_support import APPS, served

pytestmark = pytest.mark.postgres


def test_a_wait_reads_its_run_when_its_end_is_heard_not_at_each_batch_of_events(
    postgres_dsn: str, postgres_schema: str
) -> None:
    store = open_store(postgres_dsn, schema=postgres_schema)
    try:
        with served(store, config=ServeConfig(workers=1)) as base:
            runner = APPS[base].state.serve.runner
            real = runner.runs.aget
            reads: list[str] = []

            async def counted(run_id: str, *args: Any, **kwargs: Any) -> Any:
                reads.append(run_id)
                return await real(run_id, *args, **kwargs)

            runner.runs.aget = counted
            with get_sync_client(url=base, api_key=None) as client:
                thread = client.threads.create()
                out = client.runs.wait(thread["thread_id"], "steps", input={"n": 0})
                assert out == {"n": 10}
                runs = client.runs.list(thread["thread_id"])
            assert len(runs) == 1 and runs[0]["status"] == "success"
            mine = [r for r in reads if r == runs[0]["run_id"]]
            # one read once the end is heard (a second only if a one-second poll came first)
            assert 1 <= len(mine) <= 2, mine
    finally:
        store.close()
