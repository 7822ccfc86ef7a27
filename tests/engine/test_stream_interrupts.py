"""A paused run's ``values`` and ``updates`` streams end with ``{"__interrupt__": (...)}``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import END, START, AppendList, Checkpointer, Command, Graph, Interrupt, interrupt


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]


def ask(state: Any) -> dict[str, Any]:
    return {"log": [interrupt({"question": "ship?"})]}


def graph() -> Graph:
    g = Graph(State).add_node("first", lambda s: {"log": ["first"]}).add_node("ask", ask)
    return g.add_edge(START, "first").add_edge("first", "ask").add_edge("ask", END)


def test_updates_and_values_yield_the_interrupt(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    items = list(app.stream({}, mode=["updates", "values"], thread_id="t"))
    updates = [i for m, i in items if m == "updates"]
    values = [i for m, i in items if m == "values"]
    assert updates[0] == {"first": {"log": ["first"]}}
    [pending] = updates[-1]["__interrupt__"]
    assert isinstance(pending, Interrupt) and pending.value == {"question": "ship?"} and pending.node == "ask"
    assert values[-1] == {"__interrupt__": (pending,)}
    assert values[-2] == {"log": ["first"]}
    resumed = list(app.stream(Command(resume="yes"), mode="updates", thread_id="t"))
    assert resumed == [{"ask": {"log": ["yes"]}}]  # a finished run yields no interrupt item


def test_a_breakpoint_yields_an_empty_interrupt(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver(), interrupt_before=["ask"])
    assert list(app.stream({}, mode="updates", thread_id="t")) == [{"first": {"log": ["first"]}}, {"__interrupt__": ()}]
