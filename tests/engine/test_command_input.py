"""``invoke(Command(goto=..., update=...))`` on a paused or finished thread routes there, and
``update_state(..., as_node=END)`` ends a thread by hand, dropping its pending tasks and
interrupts; on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, AppendList, Checkpointer, Command, Graph, MissingNodeError, interrupt


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]


def ask(state: Any) -> dict[str, Any]:
    return {"log": [f"ask:{interrupt('ok?')}"]}


def graph() -> Graph:
    g = Graph(State).add_node("start", lambda s: {"log": ["start"]}).add_node("ask", ask, destinations=["cleanup"])
    g.add_node("cleanup", lambda s: {"log": ["cleanup"]}).add_node("after", lambda s: {"log": ["after"]})
    g.add_edge(START, "start").add_edge("start", "ask").add_edge("ask", "after").add_edge("after", END)
    return g.add_edge("cleanup", END)


def test_a_goto_on_a_paused_thread_routes_there(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    assert "__interrupt__" in app.invoke({}, thread_id="t")
    out = app.invoke(Command(goto="cleanup", update={"log": ["skipped the question"]}), thread_id="t")
    assert out["log"] == ["start", "skipped the question", "cleanup"]
    state = app.get_state("t")
    assert state.next == () and state.interrupts == () and state.status == "idle"


def test_a_goto_on_a_finished_thread_runs_the_target_and_what_follows(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    app.invoke({}, thread_id="t")
    app.invoke(Command(resume="yes"), thread_id="t")
    out = app.invoke(Command(goto="after"), thread_id="t")
    assert out["log"] == ["start", "ask:yes", "after", "after"]


def test_a_goto_to_an_unknown_node_is_refused() -> None:
    from plait import MemoryCheckpointer

    app = graph().compile(MemoryCheckpointer())
    app.invoke({}, thread_id="t")
    with pytest.raises(MissingNodeError, match="nowhere"):
        app.invoke(Command(goto="nowhere"), thread_id="t")


def test_update_as_end_drops_pending_tasks_and_interrupts(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    app.invoke({}, thread_id="t")
    assert app.get_state("t").interrupts
    app.update_state("t", {"log": ["ended by hand"]}, as_node=END)
    state = app.get_state("t")
    assert state.next == () and state.interrupts == () and state.status == "idle"
    assert state.values["log"] == ["start", "ended by hand"]
    assert app.invoke(None, thread_id="t")["log"] == ["start", "ended by hand"]  # nothing left to run
