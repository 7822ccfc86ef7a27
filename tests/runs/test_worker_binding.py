"""A worker runs a graph with every option it was compiled with: it rebinds the graph on its own
checkpointer with ``CompiledGraph.bind`` (``executor=`` was lost before), and stops a run at a
step boundary through the run's hooks, not through a store of its own kind."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from plait import END, START, AppendList, Graph, StateSchema
from plait.runs import Runs, Worker

from ..engine.test_executor import CountingPool
from ._runs_support import FAST


def test_a_worker_runs_sync_nodes_on_the_executor_the_graph_was_compiled_with(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    pool = CountingPool()
    builder = Graph(StateSchema.builder().add("threads", AppendList()).build())

    def node(state: Any) -> dict[str, Any]:
        return {"threads": [threading.current_thread().name.split("_")[0]]}

    builder.add_node("a", node).add_node("b", node)
    builder.add_edge(START, "a").add_edge(START, "b").add_edge("a", END).add_edge("b", END)
    graph = builder.compile(executor=pool)

    async def go() -> None:
        worker = Worker(dsn, {"pooled": graph}, schema=schema, settings=FAST)
        task = asyncio.create_task(worker.arun(install_signal_handlers=False))
        try:
            async with Runs(dsn, schema=schema) as runs:
                run = await runs.await_run(await runs.asubmit("pooled", {}, thread_id="p"), timeout=30)
            assert run.status == "success", run
            assert run.output["threads"] == ["mine", "mine"] and pool.submitted == 2
        finally:
            worker.stop()
            worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)

    try:
        asyncio.run(go())
    finally:
        pool.pool.shutdown()
