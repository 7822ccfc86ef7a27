"""``get_state``'s status: read with the checkpoint (the SQL backends read both in one
transaction, the status from the thread's row alone), it says what ``get_thread`` says."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypedDict

from plait import END, START, AppendList, Checkpointer, Graph, interrupt


class State(TypedDict):
    log: Annotated[list[str], AppendList()]


def _ask(s: State) -> dict[str, list[str]]:
    return {"log": [str(interrupt("ok?"))]}


def graph() -> Graph:
    g = Graph(State).add_node("a", lambda s: {"log": ["a"]}).add_node("ask", _ask)
    return g.add_edge(START, "a").add_edge("a", "ask").add_edge("ask", END)


def test_the_status_of_get_state_is_the_threads(make_saver: Callable[..., Checkpointer]) -> None:
    saver = make_saver()
    app = graph().compile(saver)
    app.invoke({"log": []}, thread_id="t")
    waiting = app.get_state("t")
    info = saver.get_thread("t")
    assert info is not None and waiting.status == info.status == "interrupted"
    past = app.get_state_history("t")[-1]
    assert app.get_state("t", past.checkpoint_id).status == "interrupted"  # the thread's, at any checkpoint
    lease = saver.take_lease("t", "someone")
    try:
        assert app.get_state("t").status == saver.get_thread("t").status == "busy"  # type: ignore[union-attr]
    finally:
        saver.release_lease(lease)
    assert app.get_state("nobody", default=None) is None
