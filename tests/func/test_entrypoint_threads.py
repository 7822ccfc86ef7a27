"""An entrypoint's threads read and edited in the function's terms (get_state, history,
update_state, time travel), and its streams (updates, values, custom, messages, several
modes, subgraphs), on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait import Checkpointer, Command, CompiledGraph, NodeContext, entrypoint, interrupt, task


@pytest.fixture
def saver(make_saver: Callable[..., Checkpointer]) -> Checkpointer:
    return make_saver()


def counter(saver: Checkpointer, ran: list[int]) -> Any:
    @task
    def add(a: int, b: int) -> int:
        ran.append(b)
        return a + b

    @entrypoint(checkpointer=saver)
    def total(n: int, *, previous: int | None) -> int:
        return add(previous or 0, n).result()

    return total


def test_get_state_and_history_show_the_return_value(saver: Checkpointer) -> None:
    app = counter(saver, [])
    assert app.invoke(1, thread_id="t") == 1
    assert app.invoke(2, thread_id="t") == 3
    state = app.get_state("t")
    assert state.values == 3 and state.next == () and state.status == "idle"
    history = app.get_state_history("t")
    assert [h.values for h in history if h.metadata.get("source") == "loop"] == [3, 1]
    assert isinstance(app.graph, CompiledGraph) and app.graph.get_state("t").values["input"] == 2


def test_update_state_sets_the_value_the_next_run_gets_as_previous(saver: Checkpointer) -> None:
    app = counter(saver, [])
    app.invoke(1, thread_id="t")
    app.update_state("t", 10)
    assert app.get_state("t").values == 10
    assert app.invoke(5, thread_id="t") == 15
    app.update_state("t", entrypoint.final(value="shown", save=100))
    assert app.get_state("t").values == "shown"
    assert app.invoke(1, thread_id="t") == 101


def test_time_travel_runs_again_from_a_past_checkpoint_as_a_new_branch(saver: Checkpointer) -> None:
    ran: list[int] = []
    app = counter(saver, ran)
    app.invoke(1, thread_id="t")
    app.invoke(2, thread_id="t")
    app.invoke(4, thread_id="t")
    assert app.get_state("t").values == 7
    second_input = next(h for h in app.get_state_history("t") if h.metadata.get("source") == "input" and h.step == 2)
    # re-run the second call from its input checkpoint: previous was 1 there, so 1 + 2
    assert app.invoke(None, thread_id="t", checkpoint_id=second_input.checkpoint_id) == 3
    assert app.get_state("t").values == 3
    assert app.invoke(10, thread_id="t") == 13, "the new branch goes on from there"


def test_an_interrupted_thread_shows_its_interrupt_and_status(saver: Checkpointer) -> None:
    @entrypoint(checkpointer=saver)
    def review(draft: str) -> str:
        verdict: str = interrupt({"draft": draft})
        return f"{draft}: {verdict}"

    paused = review.invoke("essay", thread_id="t")
    (pause,) = paused["__interrupt__"]
    state = review.get_state("t")
    assert state.status == "interrupted" and state.interrupts[0].value == {"draft": "essay"}
    assert state.next == ("review",)
    assert review.invoke(Command(resume="fine"), thread_id="t") == "essay: fine"


def test_values_mode_yields_the_return_value_and_several_modes_come_as_pairs(saver: Checkpointer) -> None:
    @task
    def shout(s: str) -> str:
        return s.upper()

    @entrypoint(checkpointer=saver)
    def flow(s: str, *, writer: Any) -> str:
        writer({"started": s})
        return shout(s).result() + "!"

    assert list(flow.stream("a", thread_id="t", mode="values")) == ["A!"]
    assert list(flow.stream("b", thread_id="t", stream_mode=["values", "custom", "updates"])) == [
        ("custom", {"started": "b"}),
        ("updates", {"shout": "B"}),
        ("updates", {"flow": "B!"}),
        ("values", "B!"),
    ]
    assert list(flow.stream("c", thread_id="t", mode="custom")) == [{"started": "c"}]


def test_messages_mode_streams_what_the_function_streams(saver: Checkpointer) -> None:
    @entrypoint(checkpointer=saver)
    async def chat(question: str, *, ctx: NodeContext) -> dict[str, Any]:
        return await ctx.astream_message(["Hel", "lo"])

    async def go() -> list[Any]:
        return [item async for item in chat.astream("hi", thread_id="t", mode="messages")]

    items = asyncio.run(go())
    assert [chunk["content"] for chunk, _ in items] == ["Hel", "lo"]
    assert items[0][1]["langgraph_node"] == "chat"
    assert chat.get_state("t").values["content"] == "Hello"


def test_a_graph_run_inside_an_entrypoint_streams_as_a_subgraph(saver: Checkpointer) -> None:
    from plait import END, START, Graph, StateSchema

    inner = Graph(StateSchema.builder().add_lww("x").build())
    inner.add_node("double", lambda s: {"x": s["x"] * 2}).add_edge(START, "double").add_edge("double", END)
    sub = inner.compile()

    @entrypoint(checkpointer=saver)
    def outer(x: int) -> int:
        return int(sub.invoke({"x": x})["x"]) + 1

    items = list(outer.stream(3, thread_id="t", subgraphs=True))
    assert items[-1] == ((), {"outer": 7})
    assert any(ns and item == {"double": {"x": 6}} for ns, item in items)


def test_bind_moves_the_workflow_to_another_store(saver: Checkpointer) -> None:
    from plait import MemoryCheckpointer

    app = counter(saver, [])
    other = app.bind(checkpointer=MemoryCheckpointer())
    assert other.invoke(2, thread_id="t") == 2 and other.get_state("t").values == 2
    assert app.graph.get_state("t", default=None) is None, "the original store has no such thread"


def test_get_state_takes_a_default_for_a_thread_that_is_not_there(saver: Checkpointer) -> None:
    app = counter(saver, [])
    assert app.get_state("nobody", default=None) is None
    app.invoke(1, thread_id="t")
    assert app.get_state({"configurable": {"thread_id": "t"}}, default=None).values == 1
