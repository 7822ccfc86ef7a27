"""``update_state(thread, None, as_node=END)``: LangGraph's way to clear a paused thread's
pending tasks and interrupts without writing anything (ported from its
``test_large_cases.py``: "flow: interrupt -> clear tasks"), on every backend."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import END, START, Checkpointer, Command, Graph, interrupt


class State(TypedDict):
    my_key: Annotated[str, operator.add]
    market: str


def _tool_two() -> Graph:
    def tool_two_node(s: Any) -> Any:
        if s["market"] == "DE":
            answer = interrupt("Just because...")
        else:
            answer = " all good"
        return {"my_key": answer}

    return Graph(State).add_node("tool_two", tool_two_node).add_edge(START, "tool_two").add_edge("tool_two", END)


def test_a_none_update_as_end_clears_the_interrupt_and_the_next_tasks(make_saver: Callable[..., Checkpointer]) -> None:
    app = _tool_two().compile(checkpointer=make_saver())
    paused = app.invoke({"my_key": "value ⛰️", "market": "DE"}, thread_id="1", durability="exit")
    assert paused["__interrupt__"][0].value == "Just because..."
    before = app.get_state("1")
    assert before.next == ("tool_two",) and before.interrupts

    app.update_state("1", None, as_node=END)

    state = app.get_state("1")
    assert dict(state.values) == {"my_key": "value ⛰️", "market": "DE"}
    assert state.next == () and state.tasks == () and state.interrupts == ()
    assert state.source == "update" and state.step == before.step + 1 and state.parent_id == before.checkpoint_id
    assert state.status == "idle"


def test_a_none_update_writes_nothing_and_keeps_what_was_next(make_saver: Callable[..., Checkpointer]) -> None:
    app = _tool_two().compile(checkpointer=make_saver())
    app.invoke({"my_key": "v", "market": "DE"}, thread_id="1")
    app.update_state("1", None)  # as {} does: a checkpoint with the same values and tasks
    state = app.get_state("1")
    assert dict(state.values) == {"my_key": "v", "market": "DE"} and state.next == ("tool_two",)
    assert app.invoke(Command(resume="!"), thread_id="1") == {"my_key": "v!", "market": "DE"}
