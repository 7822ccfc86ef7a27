"""The executor seam: a graph compiled with an executor runs its sync nodes there."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from plait import END, START, AppendList, Graph, MemoryCheckpointer, StateSchema


class CountingPool:
    """An executor of the test's own: counts what it ran, on threads it names."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mine")
        self.submitted = 0

    def submit(self, fn: Callable[[], None], /) -> object:
        self.submitted += 1
        return self.pool.submit(fn)


def _fan_out() -> Graph:
    schema = StateSchema.builder().add("threads", AppendList()).build()
    graph = Graph(schema)

    def node(state: Any) -> dict[str, Any]:
        return {"threads": [threading.current_thread().name.split("_")[0]]}

    for name in ("a", "b", "c"):
        graph.add_node(name, node).add_edge(START, name).add_edge(name, END)
    return graph


def test_sync_nodes_run_on_the_executor_the_graph_was_compiled_with() -> None:
    mine = CountingPool()
    try:
        app = _fan_out().compile(checkpointer=MemoryCheckpointer(), executor=mine)
        out = app.invoke({}, thread_id="t")
        assert out["threads"] == ["mine", "mine", "mine"] and mine.submitted == 3
    finally:
        mine.pool.shutdown()


def test_without_one_they_run_on_the_shared_pool() -> None:
    out = _fan_out().compile(checkpointer=MemoryCheckpointer()).invoke({}, thread_id="t")
    assert out["threads"] == ["plait-node"] * 3
