"""Graph and Dag: building, routing shapes, Dag layers, and the compile-time checks that
name their culprit."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Annotated, Any, TypedDict

import pytest

from plait import (
    END,
    START,
    AppendList,
    Dag,
    Graph,
    GraphError,
    LastWriteWins,
    MemoryCheckpointer,
    MissingNodeError,
    RetryPolicy,
    Send,
    StateSchema,
    Sum,
)


class Typed(TypedDict):
    log: Annotated[list[str], AppendList()]
    total: Annotated[int, Sum()]
    phase: str


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add("total", Sum()).add_lww("phase").build()


def logger(name: str) -> Any:
    def node(state: Any) -> Any:
        return {"log": [name]}

    node.__name__ = name
    return node


# -- building --------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [schema(), Typed], ids=["StateSchema", "TypedDict"])
def test_a_graph_accepts_a_schema_or_an_annotated_typed_dict(declared: Any) -> None:
    g = Graph(declared)
    g.add_node("a", lambda s: {"log": ["a"], "total": 2, "phase": "one"})
    g.add_node("b", lambda s: {"log": ["b"], "total": 3, "phase": "two"})
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    out = g.compile().invoke({"total": 1})
    assert out == {"log": ["a", "b"], "total": 6, "phase": "two"}


def test_the_typed_dict_schema_equals_the_built_one() -> None:
    assert Graph(Typed).schema == schema()
    assert isinstance(Graph(Typed).schema.channel("phase").reducer, LastWriteWins)


def test_add_node_options_reach_the_spec() -> None:
    policy = RetryPolicy(max_attempts=2)
    g = Graph(schema()).add_node("a", lambda s: "x", output_key="phase", retry=policy, timeout=1.5)
    g.add_edge(START, "a")
    node = g.spec().nodes["a"]
    assert (node.output_key, node.retry, node.timeout) == ("phase", policy, 1.5)
    assert g.compile().invoke({}) == {"log": [], "total": 0, "phase": "x"}


def test_a_join_runs_its_target_once_after_the_longer_branch_finished() -> None:
    calls = {"c": 0}

    def c(state: Any) -> Any:
        calls["c"] += 1
        return {"log": ["c"]}

    g = Graph(schema())
    g.add_node("a", logger("a")).add_node("b", logger("b")).add_node("b2", logger("b2")).add_node("c", c)
    g.add_edge(START, "a").add_edge(START, "b").add_edge("b", "b2")
    g.add_edge(["a", "b2"], "c").add_edge("c", END)
    app = g.compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    assert calls["c"] == 1
    assert out["log"] == ["a", "b", "b2", "c"]
    # c ran in the super-step after b2's, which came after a's and b's
    steps = {n: h.step for h in app.get_state_history("t") for n in h.metadata.get("writes", {})}
    assert steps["a"] == steps["b"] == 1
    assert steps["b2"] == 2
    assert steps["c"] == 3


def test_a_join_does_not_count_arrivals_from_an_earlier_run_of_the_thread() -> None:
    g = Graph(schema())
    for n in ("start", "a", "b", "c"):
        g.add_node(n, logger(n))
    g.add_edge(START, "start")
    g.add_conditional_edges("start", lambda s: s["phase"], ["a", "b"])
    g.add_edge(["a", "b"], "c")
    app = g.compile(MemoryCheckpointer())
    assert app.invoke({"phase": "a"}, thread_id="t")["log"] == ["start", "a"]
    out = app.invoke({"phase": "b"}, thread_id="t")
    assert out["log"] == ["start", "a", "start", "b"], "only b finished in this run: c must not run"


def test_without_a_join_the_target_runs_once_per_arrival() -> None:
    g = Graph(schema())
    g.add_node("a", logger("a")).add_node("b", logger("b")).add_node("b2", logger("b2")).add_node("c", logger("c"))
    g.add_edge(START, "a").add_edge(START, "b").add_edge("b", "b2")
    g.add_edge("a", "c").add_edge("b2", "c")
    assert g.compile().invoke({})["log"] == ["a", "b", "c", "b2", "c"]


def test_a_router_picks_a_node_through_its_path_map() -> None:
    g = Graph(schema())
    g.add_node("start", lambda s: {"phase": s["phase"]})
    g.add_node("left", logger("left")).add_node("right", logger("right"))
    g.add_edge(START, "start")
    g.add_conditional_edges("start", lambda s: s["phase"] == "l", {True: "left", False: "right"})
    app = g.compile()
    assert app.invoke({"phase": "l"})["log"] == ["left"]
    assert app.invoke({"phase": "r"})["log"] == ["right"]


def test_a_router_returning_a_list_runs_every_listed_node_in_the_next_step() -> None:
    g = Graph(schema())
    g.add_node("start", logger("start"))
    for n in ("x", "y", "z"):
        g.add_node(n, logger(n))
    g.add_edge(START, "start")
    g.add_conditional_edges("start", lambda s: ["z", "x"], ["x", "y", "z"])
    assert g.compile().invoke({})["log"] == ["start", "z", "x"]


def test_a_router_returning_end_stops_the_run() -> None:
    g = Graph(schema())
    g.add_node("loop", lambda s: {"total": 1})
    g.add_edge(START, "loop")
    g.add_conditional_edges("loop", lambda s: END if s["total"] >= 3 else "loop")
    assert g.compile().invoke({})["total"] == 3


def test_a_router_sees_its_source_node_own_writes() -> None:
    seen: list[Any] = []

    def router(state: Any) -> Any:
        seen.append(state["phase"])
        return END

    g = Graph(schema()).add_node("a", lambda s: {"phase": "written-by-a"}).add_edge(START, "a")
    g.add_conditional_edges("a", router)
    g.compile().invoke({"phase": "input"})
    assert seen == ["written-by-a"]


def test_a_router_returning_sends_runs_the_target_once_per_send_with_its_arg() -> None:
    def work(arg: Any) -> Any:
        return {"log": [f"w{arg}"]}

    g = Graph(schema())
    g.add_node("split", logger("split")).add_node("work", work)
    g.add_edge(START, "split")
    g.add_conditional_edges("split", lambda s: [Send("work", i) for i in range(3)])
    assert g.compile().invoke({})["log"] == ["split", "w0", "w1", "w2"]


def test_a_router_may_choose_the_entry_point() -> None:
    g = Graph(schema()).add_node("a", logger("a")).add_node("b", logger("b"))
    g.add_conditional_edges(START, lambda s: s["phase"], ["a", "b"])
    assert g.compile().invoke({"phase": "b"})["log"] == ["b"]


def test_dag_steps_and_edges_chain_and_compile() -> None:
    dag = Dag(schema()).step("a", logger("a")).step("b", logger("b")).step("c", logger("c"))
    returned = dag.edge("a", "b").edge("b", "c")
    assert returned is dag
    assert dag.compile().invoke({})["log"] == ["a", "b", "c"]


def test_dag_layers_are_the_longest_path_from_the_roots() -> None:
    dag = Dag(schema())
    for n in ("root", "mid", "leaf", "other"):
        dag.step(n, logger(n))
    dag.edge("root", "mid").edge("mid", "leaf").edge("root", "leaf")
    assert dag.layers() == [["root", "other"], ["mid"], ["leaf"]]
    app = dag.compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    assert out["log"] == ["root", "other", "mid", "leaf"], "leaf waits for mid, not only for root"


def test_async_steps_of_one_dag_layer_run_concurrently() -> None:
    a_ready, b_ready = asyncio.Event(), asyncio.Event()

    async def a(state: Any) -> Any:
        a_ready.set()
        await asyncio.wait_for(b_ready.wait(), 5)  # deadlocks (then times out) if run one by one
        return {"log": ["a"]}

    async def b(state: Any) -> Any:
        b_ready.set()
        await asyncio.wait_for(a_ready.wait(), 5)
        return {"log": ["b"]}

    app = Dag(schema()).step("a", a).step("b", b).compile()
    assert asyncio.run(app.ainvoke({}))["log"] == ["a", "b"]


def test_sync_steps_of_one_dag_layer_run_concurrently() -> None:
    barrier = threading.Barrier(2, timeout=5)

    def a(state: Any) -> Any:
        barrier.wait()  # BrokenBarrierError if b does not run at the same time
        return {"log": ["a"]}

    def b(state: Any) -> Any:
        barrier.wait()
        return {"log": ["b"]}

    app = Dag(schema()).step("a", a).step("b", b).step("c", logger("c")).edge("a", "c").edge("b", "c").compile()
    assert app.invoke({})["log"] == ["a", "b", "c"]


# -- compile-time validation -------------------------------------------------------------


def base_graph() -> Graph:
    return Graph(schema()).add_node("a", logger("a")).add_edge(START, "a")


def test_an_edge_to_an_unknown_node_is_named() -> None:
    g = base_graph().add_edge("a", "ghost")
    with pytest.raises(GraphError, match="'ghost'"):
        g.compile()


def test_an_edge_from_an_unknown_node_is_named() -> None:
    g = base_graph().add_edge("ghost", "a")
    with pytest.raises(GraphError, match="'ghost'"):
        g.compile()


def test_a_join_naming_an_unknown_node_is_named() -> None:
    g = base_graph().add_node("b", logger("b")).add_edge("a", "b").add_edge(["a", "ghost"], "b")
    with pytest.raises(GraphError, match="'ghost'"):
        g.compile()


def test_a_path_map_naming_an_unknown_node_is_named() -> None:
    g = base_graph().add_conditional_edges("a", lambda s: "x", {"x": "ghost"})
    with pytest.raises(GraphError, match="'ghost'"):
        g.compile()


def test_a_node_unreachable_from_start_is_named() -> None:
    g = base_graph().add_node("island", logger("island")).add_node("b", logger("b")).add_edge("a", "b")
    with pytest.raises(GraphError, match="unreachable.*'island'") as info:
        g.compile()
    assert "'b'" not in str(info.value)


def cyclic_dag() -> Dag:
    dag = Dag(schema()).step("r", logger("r")).step("x", logger("x")).step("y", logger("y")).step("z", logger("z"))
    return dag.edge("r", "x").edge("x", "y").edge("y", "z").edge("z", "x")


def test_a_dag_cycle_is_rejected_naming_the_cycle() -> None:
    with pytest.raises(GraphError, match="cycle") as info:
        cyclic_dag().compile()
    named = str(info.value).split("cycle", 1)[1]
    assert set(re.findall(r"\w+", named)) == {"x", "y", "z"}, "the cycle's nodes, and only those"


def test_a_dag_cycle_is_named_in_edge_direction() -> None:
    with pytest.raises(GraphError) as info:
        cyclic_dag().layers()
    message = str(info.value)
    assert any(c in message for c in ("x -> y -> z -> x", "y -> z -> x -> y", "z -> x -> y -> z")), message


@pytest.mark.parametrize("name", [START, END, "__x"])
def test_reserved_node_names_are_refused(name: str) -> None:
    with pytest.raises(GraphError, match="reserved") as info:
        Graph(schema()).add_node(name, logger("x"))
    assert repr(name) in str(info.value)


def test_a_duplicate_node_name_is_refused() -> None:
    g = Graph(schema()).add_node("a", logger("a"))
    with pytest.raises(GraphError, match="'a'.*twice"):
        g.add_node("a", logger("a"))
    with pytest.raises(GraphError, match="'a'.*twice"):
        Dag(schema()).step("a", logger("a")).step("a", logger("a"))


def test_an_output_key_that_is_not_a_channel_is_named() -> None:
    g = Graph(schema()).add_node("a", lambda s: 1, output_key="nope").add_edge(START, "a")
    with pytest.raises(GraphError, match="'nope'"):
        g.compile()


def test_a_graph_without_an_entry_point_is_refused() -> None:
    g = Graph(schema()).add_node("a", logger("a"))
    with pytest.raises(GraphError, match="entry point"):
        g.compile()


def test_a_graph_without_nodes_is_refused() -> None:
    with pytest.raises(GraphError, match="no nodes"):
        Graph(schema()).compile()


@pytest.mark.parametrize("option", ["interrupt_before", "interrupt_after"])
def test_a_breakpoint_on_an_unknown_node_is_a_missing_node_error(option: str) -> None:
    kwargs: dict[str, Any] = {option: ["ghost"]}
    with pytest.raises(MissingNodeError, match="'ghost'") as info:
        base_graph().compile(MemoryCheckpointer(), **kwargs)
    assert info.value.node == "ghost"
    assert info.value.known == ("a",)
