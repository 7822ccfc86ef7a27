"""ThreadState shows a partly finished step: which tasks finished (their saved writes), which
failed and why, which wait on an interrupt; finished ones are not in ``next``. Every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, AppendList, Checkpointer, Command, Graph, NodeError, interrupt


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]


def boom(state: Any) -> dict[str, Any]:
    raise ValueError("the API said no")


def ask(state: Any) -> dict[str, Any]:
    return {"log": [interrupt("which?")]}


def step(failing: bool) -> Graph:
    g = Graph(State).add_node("ok", lambda s: {"log": ["ok"]}).add_node("ask", ask)
    g.add_edge(START, "ok").add_edge(START, "ask").add_edge("ok", END).add_edge("ask", END)
    if failing:
        g.add_node("boom", boom).add_edge(START, "boom").add_edge("boom", END)
    return g


def test_a_failed_step_shows_each_task(make_saver: Callable[..., Checkpointer]) -> None:
    app = step(failing=True).compile(make_saver())
    with pytest.raises(NodeError):
        app.invoke({}, thread_id="t")
    state = app.get_state("t")
    assert state.next == ("ask", "boom")  # "ok" finished: its writes are saved
    tasks = {t.node: t for t in state.tasks}
    assert tasks["ok"].status == "done" and tasks["ok"].result == {"log": ["ok"]}
    assert tasks["boom"].status == "failed" and tasks["boom"].error is not None
    assert "the API said no" in tasks["boom"].error.message
    assert tasks["ask"].status == "interrupted" and [i.value for i in tasks["ask"].interrupts] == ["which?"]


def test_an_interrupted_step_shows_the_finished_task_and_a_resume_clears_it(
    make_saver: Callable[..., Checkpointer],
) -> None:
    app = step(failing=False).compile(make_saver())
    app.invoke({}, thread_id="t")
    state = app.get_state("t")
    assert state.next == ("ask",)
    assert [(t.node, t.status) for t in state.tasks] == [("ok", "done"), ("ask", "interrupted")]
    app.invoke(Command(resume="this"), thread_id="t")
    assert app.get_state("t").tasks == () and app.get_state("t").values["log"] == ["ok", "this"]


def test_a_plain_checkpoint_lists_pending_tasks() -> None:
    from plait import MemoryCheckpointer

    app = step(failing=False).compile(MemoryCheckpointer(), interrupt_before=["ok"])
    app.invoke({}, thread_id="t")
    assert [(t.node, t.status) for t in app.get_state("t").tasks] == [("ok", "pending"), ("ask", "pending")]
