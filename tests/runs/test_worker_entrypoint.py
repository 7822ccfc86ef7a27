"""A worker runs an entrypoint like any graph: loaded by target (``plait worker --graph
file.py:workflow`` loads the same way) or given as an object, its tasks recorded on the
worker's PostgreSQL, its run output the graph's channels (``input``, ``output``,
``previous``)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from plait import entrypoint, task
from plait.runs import Runs

from ._runs_support import worker_in_process

pytestmark = pytest.mark.postgres

WORKFLOW = """
    from plait import entrypoint, interrupt, task

    @task
    def triple(x):
        return 3 * x

    @entrypoint()
    def workflow(n, *, previous):
        total = sum(f.result() for f in [triple(i) for i in range(n)])
        approved = interrupt({"total": total})
        return {"total": total, "approved": approved, "before": previous}
"""


def test_a_worker_runs_an_entrypoint_loaded_by_target(runs_db: tuple[str, str], tmp_path: Path) -> None:
    dsn, schema = runs_db
    (tmp_path / "wf.py").write_text(textwrap.dedent(WORKFLOW))
    target = f"{tmp_path / 'wf.py'}:workflow"

    async def go() -> None:
        async with worker_in_process(dsn, schema, [target]), Runs(dsn, schema=schema) as runs:
            run = await runs.await_run(await runs.asubmit(target, {"input": 4}, thread_id="w"), timeout=30)
            assert run.status == "interrupted", run
            assert run.output["__interrupt__"][0]["value"] == {"total": 18}
            run = await runs.await_run(await runs.asubmit(target, None, thread_id="w", resume="yes"), timeout=30)
            assert run.status == "success", run
            assert run.output["output"] == {"total": 18, "approved": "yes", "before": None}

    asyncio.run(go())


def test_a_worker_takes_an_entrypoint_object(runs_db: tuple[str, str]) -> None:
    from plait.runs import Worker

    from ._runs_support import FAST

    dsn, schema = runs_db

    @task
    def shout(s: str) -> str:
        return s.upper()

    @entrypoint()
    def loud(s: str) -> str:
        return shout(s).result()

    async def go() -> None:
        worker = Worker(dsn, {"loud": loud}, schema=schema, settings=FAST)
        running = asyncio.create_task(worker.arun(install_signal_handlers=False))
        try:
            async with Runs(dsn, schema=schema) as runs:
                run = await runs.await_run(await runs.asubmit("loud", {"input": "hi"}, thread_id="l"), timeout=30)
            assert run.status == "success" and run.output["output"] == "HI", run
        finally:
            worker.stop()
            worker.stop()
            await asyncio.wait_for(running, 30)

    asyncio.run(go())
