"""``CompiledGraph.bind``: the same graph on another checkpointer, namespace or hooks, with every
other option kept. The worker, the Studio and the CLI rebind a user's graph with it; before, each
copied the options by hand and lost ``executor=``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from plait import END, START, AppendList, Graph, MemoryCheckpointer, NodeContext, StateSchema, Store
from plait.engine.options import RunHooks
from plait.errors import MissingNodeError

from ..engine.test_executor import CountingPool


def _graph() -> Graph:
    schema = StateSchema.builder().add("threads", AppendList()).build()
    g = Graph(schema)

    def node(state: Any) -> dict[str, Any]:
        return {"threads": [threading.current_thread().name.split("_")[0]]}

    for name in ("a", "b"):
        g.add_node(name, node).add_edge(START, name).add_edge(name, END)
    return g


def test_bind_keeps_every_option_it_is_not_given() -> None:
    pool = CountingPool()
    hooks = RunHooks()
    try:
        app = _graph().compile(
            checkpointer=MemoryCheckpointer(), interrupt_before=["b"], name="mine", executor=pool, namespace="ns"
        )
        other = MemoryCheckpointer()
        bound = app.bind(checkpointer=other, namespace="elsewhere", hooks=hooks)
        assert bound.checkpointer is other and bound.namespace == "elsewhere" and bound.hooks is hooks
        assert bound.executor is pool and bound.interrupt_before == {"b"} and bound.name == "mine"
        assert bound.fingerprint == app.fingerprint and bound.spec is app.spec
        assert app.checkpointer is not other and app.namespace == "ns" and app.hooks is None  # not changed
        kept = app.bind()
        assert kept.binding == app.binding
        assert app.bind(hooks=None).hooks is None
        assert _graph().compile(checkpointer=other).bind(checkpointer=None).checkpointer is None
    finally:
        pool.pool.shutdown()


def test_a_rebound_graph_runs_its_sync_nodes_on_the_graphs_executor() -> None:
    pool = CountingPool()
    try:
        app = _graph().compile(executor=pool)
        out = app.bind(checkpointer=MemoryCheckpointer()).invoke({}, thread_id="t")
        assert out["threads"] == ["mine", "mine"]
    finally:
        pool.pool.shutdown()


def test_a_breakpoint_of_star_is_every_node_of_the_graph() -> None:
    app = _graph().compile(checkpointer=MemoryCheckpointer(), interrupt_after="*")
    assert app.interrupt_after == {"a", "b"} and app.interrupt_before == frozenset()
    assert app.bind(interrupt_before=["*"]).interrupt_before == {"a", "b"}
    assert app.bind(interrupt_before="*").interrupt_before == {"a", "b"}
    with pytest.raises(MissingNodeError, match="'c'"):
        app.bind(interrupt_before=["c"])


def test_bind_gives_a_graph_another_memory_store_and_keeps_it_when_the_checkpointer_changes() -> None:
    cp, other = MemoryCheckpointer(), MemoryCheckpointer()
    mine = Store()

    def remember(state: Any, ctx: NodeContext) -> dict[str, Any]:
        ctx.store.put(("seen",), "k", {"by": "node"})
        return {}

    g = Graph(StateSchema.builder().add("threads", AppendList()).build())
    g.add_node("r", remember).add_edge(START, "r").add_edge("r", END)
    app = g.compile(checkpointer=cp)
    assert app.binding.store is None
    bound = app.bind(store=mine)
    assert bound.binding.store is mine and app.binding.store is None
    assert bound.bind(checkpointer=other).binding.store is mine  # not the checkpointer's own: it stays
    assert app.bind(store=True).binding.store is cp.store
    assert app.bind(store=True).bind(store=None).binding.store is None
    bound.bind(checkpointer=other).invoke({}, thread_id="t")
    found = mine.get(("seen",), "k")
    assert found is not None and found.value == {"by": "node"}
    assert cp.store.get(("seen",), "k") is None and other.store.get(("seen",), "k") is None
