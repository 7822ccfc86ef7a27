"""The two Dag scenarios of the stateful-runner spec, in plait's API."""

from __future__ import annotations

from typing import Any

import pytest

from plait import AppendMessages, Dag, MemoryCheckpointer, MergeMap, NodeError, StateSchema


def schema() -> StateSchema:
    return StateSchema.builder().add("messages", AppendMessages()).add("config", MergeMap()).build()


def test_linear_dag_second_step_reads_what_the_first_wrote() -> None:
    def a(state: Any) -> Any:
        return {"messages": [{"id": "m1", "text": "hi"}]}

    def b(state: Any) -> Any:
        return {"config": {"seen": len(state["messages"])}}

    app = Dag(schema()).step("a", a).step("b", b).edge("a", "b").compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="r")
    assert len(out["messages"]) == 1
    assert out["config"] == {"seen": 1}


def test_a_run_that_dies_in_layer_two_resumes_without_rerunning_layer_one() -> None:
    saver = MemoryCheckpointer()
    runs = {"a": 0}

    def a(state: Any) -> Any:
        runs["a"] += 1
        return {"messages": [{"id": "m1"}]}

    def bad(state: Any) -> Any:
        raise RuntimeError("first run dies on b")

    first = Dag(schema()).step("a", a).step("b", bad).edge("a", "b").compile(saver)
    with pytest.raises(NodeError) as info:
        first.invoke({}, thread_id="r")
    assert info.value.node == "b"
    assert isinstance(info.value.__cause__, RuntimeError)
    history = first.get_state_history("r")
    assert [h.step for h in history] == [1, 0]  # the input checkpoint and layer 1
    assert runs["a"] == 1

    second = Dag(schema()).step("a", a).step("b", lambda s: {"config": {"ok": True}}).edge("a", "b").compile(saver)
    out = second.invoke(None, thread_id="r")
    assert runs["a"] == 1, "layer 1 must not run again"
    assert out["config"] == {"ok": True}
    assert [m["id"] for m in out["messages"]] == ["m1"]
