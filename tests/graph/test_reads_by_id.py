"""Reading past checkpoints by id in the process that wrote them: a list's earlier values
are sliced from the head this process remembers (its line of appends) rather than replayed,
and must read back exactly as a reader that did not write the thread replays them, across
appends, a list written anew, and a branch from a past checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import END, START, AppendList, Checkpointer, Graph
from plait._codec import canonical


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]
    box: list[Any]
    n: int


def _step(s: State) -> dict[str, Any]:
    n = s["n"] + 1
    # every fifth step writes the second list anew; the others append to it
    box = [f"new {n}"] if n % 5 == 0 else [*s["box"], {"n": n, "t": "x" * 300}]
    return {"log": [{"step": n, "text": "y" * 200}], "box": box, "n": n}


def graph() -> Graph:
    g = Graph(State).add_node("step", _step).add_edge(START, "step")
    return g.add_conditional_edges("step", lambda s: "step" if s["n"] < 40 else END)


def test_every_past_checkpoint_reads_as_a_new_reader_reads_it(make_saver: Callable[..., Checkpointer]) -> None:
    writer = make_saver()
    app = graph().compile(writer)
    app.invoke({"log": [], "box": [], "n": 0}, thread_id="t", recursion_limit=100)
    history = app.get_state_history("t")
    past = history[len(history) // 2]
    app.update_state("t", {"log": ["branched"]}, checkpoint_id=past.checkpoint_id)
    app.update_state("t", {"log": ["again"], "box": [*app.get_state("t").values["box"], "more"]})
    every = [h.checkpoint_id for h in history] + [h.checkpoint_id for h in app.get_state_history("t")]
    kind = writer.capabilities.kind
    reader = graph().compile(make_saver() if kind != "memory" else writer)
    for cid in every:
        warm, cold = app.get_state("t", cid), reader.get_state("t", cid)
        assert canonical(warm.values) == canonical(cold.values), cid
    assert app.get_state("t").values["log"][-2:] == ["branched", "again"]
