"""``list_threads(subgraphs=True)``: a graph's threads with its subgraphs' stored runs (each a
thread of the same id in a child namespace), on every backend."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import START, Checkpointer, Command, Graph, interrupt


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _app(saver: Checkpointer, namespace: str = "") -> Any:
    def ask(state: Any) -> Any:
        return {"log": [interrupt("ok?")]}

    inner = Graph(State).add_node("ask", ask).add_edge(START, "ask").compile()
    outer = Graph(State).add_node("first", lambda s: {"log": ["first"]}).add_node("research", inner)
    return outer.add_edge(START, "first").add_edge("first", "research").compile(saver, namespace=namespace)


def test_list_threads_can_include_the_subgraphs_runs(make_saver: Callable[..., Checkpointer]) -> None:
    saver = make_saver()
    app, other = _app(saver, "desk"), _app(saver, "elsewhere")
    app.invoke({"log": []}, thread_id="t")
    other.invoke({"log": []}, thread_id="u")
    assert [(t.thread_id, t.namespace) for t in app.list_threads()] == [("t", "desk")]
    listed = app.list_threads(subgraphs=True)
    paused_in = [f"desk|{k}" for k in app.get_state("t", subgraphs=True).subgraphs]
    assert sorted(t.namespace for t in listed) == ["desk", *paused_in] and len(paused_in) == 1
    (child,) = [t for t in listed if t.namespace != "desk"]
    assert child.thread_id == "t" and child.status == "interrupted" and child.namespace.startswith("desk|research:")
    paused = app.list_threads(subgraphs=True, status="interrupted")  # the parent pauses with its subgraph
    assert [t.namespace for t in paused] == ["desk", child.namespace]
    assert app.list_threads(subgraphs=True)[0].namespace == "desk"  # a thread, then its subgraphs' runs
    app.invoke(Command(resume="yes"), thread_id="t")
    assert {t.status for t in app.list_threads(subgraphs=True)} == {"idle"}
