"""``add_node(..., defer=True)``: the node runs once, after every other pending task of the
run has finished, across checkpoints and an interrupt, on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import END, START, AppendList, Checkpointer, Command, Graph, Send, interrupt


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]


def log(name: str) -> Any:
    return lambda state: {"log": [name]}


def collect(state: Any) -> dict[str, Any]:
    return {"log": [f"collect saw {len(state['log'])}"]}


def graph(ask: bool = False, defer: bool = True) -> Graph:
    def a3(state: Any) -> dict[str, Any]:
        if ask:
            interrupt("go on?")
        return {"log": ["a3"]}

    g = Graph(State).add_node("a", log("a")).add_node("a2", log("a2")).add_node("a3", a3).add_node("b", log("b"))
    g.add_node("collect", collect, defer=defer)
    g.add_edge(START, "a").add_edge(START, "b").add_edge("a", "a2").add_edge("a2", "a3").add_edge("a3", "collect")
    return g.add_edge("b", "collect").add_edge("collect", END)


def test_a_deferred_node_waits_for_the_longest_branch(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    out = app.invoke({}, thread_id="t")
    assert out["log"] == ["a", "b", "a2", "a3", "collect saw 4"]  # once, last
    nexts = [h.next for h in reversed(app.get_state_history("t"))]
    assert ("a2", "collect") in nexts  # held back, and stored with the step's checkpoint


def test_without_defer_it_runs_with_each_branch() -> None:
    out = graph(defer=False).compile().invoke({})
    assert out["log"] == ["a", "b", "a2", "collect saw 2", "a3", "collect saw 5"]


def test_a_deferred_node_survives_an_interrupt(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph(ask=True).compile(make_saver())
    app.invoke({}, thread_id="t")
    assert set(app.get_state("t").next) == {"a3", "collect"}
    out = app.invoke(Command(resume=True), thread_id="t")
    assert out["log"] == ["a", "b", "a2", "a3", "collect saw 4"]


def test_a_deferred_reduce_after_a_fan_out_of_sends() -> None:
    g = Graph(State).add_node("split", lambda s: None).add_node("work", log("w")).add_node("total", collect, defer=True)
    g.add_conditional_edges("split", lambda s: [Send("work", {}) for _ in range(5)])
    g.add_edge(START, "split").add_edge("split", "total").add_edge("work", "total").add_edge("total", END)
    assert g.compile().invoke({})["log"] == ["w"] * 5 + ["collect saw 5"]
