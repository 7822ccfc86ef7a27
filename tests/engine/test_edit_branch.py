"""``update_state(thread, values, checkpoint_id=C)``: a new branch of the same thread from a
past checkpoint. The history follows it; the old branch stays readable by id; on every
backend, with and without ``as_node``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypedDict

import pytest

from plait import END, START, AppendList, Checkpointer, CheckpointNotFoundError, Graph


class State(TypedDict):
    log: Annotated[list[str], AppendList()]


def graph() -> Graph:
    g = Graph(State).add_node("a", lambda s: {"log": ["a"]}).add_node("b", lambda s: {"log": ["b"]})
    return g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)


def test_an_update_of_a_past_checkpoint_branches_the_thread(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    app.invoke({"log": ["in"]}, thread_id="t")
    old = app.get_state_history("t")
    after_a = next(h for h in old if h.values["log"] == ["in", "a"])
    new_id = app.update_state("t", {"log": ["edited"]}, checkpoint_id=after_a.checkpoint_id)
    head = app.get_state("t")
    assert head.checkpoint_id == new_id and head.parent_id == after_a.checkpoint_id
    assert head.values["log"] == ["in", "a", "edited"] and head.next == ("b",)  # what after_a had next
    assert app.invoke(None, thread_id="t")["log"] == ["in", "a", "edited", "b"]
    history = [h.checkpoint_id for h in app.get_state_history("t")]
    assert new_id in history and old[0].checkpoint_id not in history  # the history follows the new branch
    assert app.get_state("t", old[0].checkpoint_id).values["log"] == ["in", "a", "b"]  # the old one stays


def test_as_node_works_on_a_past_checkpoint(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    app.invoke({}, thread_id="t")
    first = app.get_state_history("t")[-1]  # the input checkpoint: "a" was next
    app.update_state("t", {"log": ["a by hand"]}, as_node="a", checkpoint_id=first.checkpoint_id)
    assert app.get_state("t").next == ("b",)
    assert app.invoke(None, thread_id="t")["log"] == ["a by hand", "b"]


def test_an_unknown_checkpoint_is_not_found(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph().compile(make_saver())
    app.invoke({}, thread_id="t")
    with pytest.raises(CheckpointNotFoundError):
        app.update_state("t", {"log": ["x"]}, checkpoint_id="0" * 32)


def test_updates_of_one_past_checkpoint_each_branch_from_it(make_saver: Callable[..., Checkpointer]) -> None:
    # The remembered head fences these updates, and the past checkpoint's values are what
    # each new branch's list is stored against: every branch must read back as its own.
    app = graph().compile(make_saver())
    app.invoke({"log": ["in"]}, thread_id="t")
    after_a = next(h for h in app.get_state_history("t") if h.values["log"] == ["in", "a"])
    made = [app.update_state("t", {"log": [f"e{i}"]}, checkpoint_id=after_a.checkpoint_id) for i in range(5)]
    for i, cid in enumerate(made):
        state = app.get_state("t", cid)
        assert state.values["log"] == ["in", "a", f"e{i}"] and state.parent_id == after_a.checkpoint_id
    assert app.get_state("t").checkpoint_id == made[-1]
    app.update_state("t", {"log": ["on the head"]})
    assert app.get_state("t").values["log"] == ["in", "a", "e4", "on the head"]


def test_an_update_of_a_past_checkpoint_sees_a_head_another_saver_moved(
    make_saver: Callable[..., Checkpointer],
) -> None:
    saver = make_saver()
    if saver.capabilities.kind == "memory":  # (each memory saver is a store of its own)
        pytest.skip("a store only one checkpointer sees")
    app = graph().compile(saver)
    app.invoke({"log": ["in"]}, thread_id="t")
    first = app.get_state_history("t")[-1]
    app.update_state("t", {"log": ["mine"]})  # the head this saver remembers
    other = graph().compile(make_saver())
    moved = other.update_state("t", {"log": ["theirs"]})  # moves the head behind its back
    made = app.update_state("t", {"log": ["past"]}, checkpoint_id=first.checkpoint_id)
    assert made > moved and app.get_state("t").checkpoint_id == made
    assert app.get_state("t").values["log"] == ["in", "past"]
