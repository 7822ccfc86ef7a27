"""``update_state`` / ``bulk_update_state`` on a thread with no checkpoint yet create its first
checkpoint (a root, step 0, source ``update``), on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import END, START, AppendList, Checkpointer, Graph


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]
    topic: str


def graph() -> Graph:
    g = Graph(State).add_node("plan", lambda s: {"log": [f"plan {s['topic']}"]})
    g.add_node("write", lambda s: {"log": ["write"]})
    return g.add_edge(START, "plan").add_edge("plan", "write").add_edge("write", END)


def test_an_update_starts_a_thread(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    assert not app.has_thread("t")
    cid = app.update_state("t", {"topic": "tides", "log": ["seeded"]})
    state = app.get_state("t")
    assert state.checkpoint_id == cid and state.parent_id is None and state.step == 0
    assert state.source == "update" and dict(state.values) == {"topic": "tides", "log": ["seeded"]}
    assert state.next == ()
    out = app.invoke({"log": ["go"]}, thread_id="t")
    assert out["log"] == ["seeded", "go", "plan tides", "write"]


def test_an_update_as_a_node_starts_a_thread_that_continues_from_it(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    app.update_state("t", {"topic": "moon", "log": ["planned by hand"]}, as_node="plan")
    assert app.get_state("t").next == ("write",)
    assert app.invoke(None, thread_id="t")["log"] == ["planned by hand", "write"]


def test_bulk_update_starts_a_thread(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    updates: list[Any] = [{"topic": "sun"}, ({"log": ["p"]}, "plan")]
    last = app.bulk_update_state("t", updates)
    history = app.get_state_history("t")
    assert [h.step for h in history] == [1, 0] and history[0].checkpoint_id == last
    assert app.get_state("t").next == ("write",)
