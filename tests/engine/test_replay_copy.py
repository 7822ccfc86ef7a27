"""A replay from a past checkpoint first stores a copy of it (source ``replay``) as the
thread's head: the pause or failure of the replayed step is stored on the copy, and answered
there. A resume that names the original checkpoint is refused before anything is stored."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, Checkpointer, Command, Graph, InvalidResumeError, interrupt


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _app(saver: Checkpointer) -> Any:
    def ask(state: Any) -> Any:
        return {"log": [interrupt("q?")]}

    g = Graph(State).add_node("a", lambda s: {"log": ["a"]}).add_node("ask", ask)
    return g.add_edge(START, "a").add_edge("a", "ask").add_edge("ask", END).compile(checkpointer=saver)


def test_a_replay_pauses_on_its_copy_and_is_answered_there(make_saver: Callable[..., Checkpointer]) -> None:
    app = _app(make_saver())
    app.invoke({"log": []}, thread_id="t")
    app.invoke(Command(resume="first"), thread_id="t")
    before_ask = app.get_state_history("t")[1]
    assert before_ask.next == ("ask",)

    paused = app.invoke(None, thread_id="t", checkpoint_id=before_ask.checkpoint_id)
    assert paused["__interrupt__"][0].value == "q?"
    head = app.get_state("t")
    assert head.source == "replay" and head.parent_id == before_ask.checkpoint_id and head.step == before_ask.step
    assert [h.source for h in app.get_state_history("t")] == ["replay", "loop", "input"]

    with pytest.raises(InvalidResumeError, match="without checkpoint_id"):
        app.invoke(Command(resume="second"), thread_id="t", checkpoint_id=before_ask.checkpoint_id)
    assert app.get_state("t").checkpoint_id == head.checkpoint_id  # the refusal stored nothing
    assert app.get_state("t").status == "interrupted"

    assert app.invoke(Command(resume="second"), thread_id="t") == {"log": ["a", "second"]}
