"""A finished super-step leaves no pending writes behind on the checkpoint it started from.

A step's commit deletes ("folds") its parent's pending writes only when there may be some
(the engine skips that statement for a plain step), so each way a step can come to have
stored writes is run here to its end, and then every checkpoint of the thread is read back:
only a checkpoint whose step has not finished may still carry writes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from plait import (
    START,
    AppendList,
    Command,
    Durability,
    Graph,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    SqliteCheckpointer,
    StateSchema,
    interrupt,
)
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import PendingWrite

DURABILITIES: list[Durability] = ["sync", "async", "exit"]


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).build()


@pytest.fixture(params=["memory", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    cp: Checkpointer = MemoryCheckpointer() if request.param == "memory" else SqliteCheckpointer(tmp_path / "f.db")
    yield cp
    close = getattr(cp, "close", None)
    if close is not None:
        close()


def stored_writes(saver: Checkpointer, thread: str) -> dict[str, tuple[PendingWrite, ...]]:
    """Every checkpoint of the thread (all branches) with the pending writes stored on it."""

    async def read() -> dict[str, tuple[PendingWrite, ...]]:
        out = {}
        for cp in await saver.ahistory(thread):
            got = await saver.aget(thread, cp.id)
            assert got is not None
            out[cp.id] = got.pending_writes
        return out

    return asyncio.run(read())


def assert_no_writes_left(saver: Checkpointer, thread: str) -> None:
    found = stored_writes(saver, thread)
    assert found, "the run stored checkpoints"
    assert {cid: w for cid, w in found.items() if w} == {}


def test_a_fan_out_step_whose_results_were_flushed_is_folded(saver: Checkpointer, durability: Durability) -> None:
    g = Graph(schema())
    for name in ("a", "b", "c"):
        g.add_node(name, lambda s, name=name: {"log": [name]})
        g.add_edge(START, name)
    app = g.compile(checkpointer=saver)
    out = app.invoke({}, thread_id="t", durability=durability)
    assert sorted(out["log"]) == ["a", "b", "c"]
    assert_no_writes_left(saver, "t")


def test_a_lone_node_with_a_recorded_effect_is_folded(saver: Checkpointer, durability: Durability) -> None:
    def pay(s: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"log": [ctx.once("charge", lambda: "ch-1")]}

    app = Graph(schema()).add_node("pay", pay).add_edge(START, "pay").compile(checkpointer=saver)
    assert app.invoke({}, thread_id="t", durability=durability)["log"] == ["ch-1"]
    assert_no_writes_left(saver, "t")


def test_a_step_resumed_after_a_failure_is_folded(saver: Checkpointer, durability: Durability) -> None:
    failures = [1]

    def flaky(s: Any) -> dict[str, Any]:
        if failures:
            failures.pop()
            raise RuntimeError("once")
        return {"log": ["flaky"]}

    g = Graph(schema()).add_node("ok", lambda s: {"log": ["ok"]}).add_node("flaky", flaky)
    app = g.add_edge(START, "ok").add_edge(START, "flaky").compile(checkpointer=saver)
    with pytest.raises(NodeError):
        app.invoke({}, thread_id="t", durability=durability)
    assert any(stored_writes(saver, "t").values()), "the finished task's result was saved"
    assert sorted(app.invoke(None, thread_id="t", durability=durability)["log"]) == ["flaky", "ok"]
    assert_no_writes_left(saver, "t")


def test_a_step_resumed_after_an_interrupt_is_folded(saver: Checkpointer, durability: Durability) -> None:
    def ask(s: Any) -> dict[str, Any]:
        return {"log": [interrupt("ok?")]}

    app = Graph(schema()).add_node("ask", ask).add_edge(START, "ask").compile(checkpointer=saver)
    app.invoke({}, thread_id="t", durability=durability)
    assert any(stored_writes(saver, "t").values()), "the interrupt is stored on the head"
    assert app.invoke(Command(resume="yes"), thread_id="t", durability=durability)["log"] == ["yes"]
    assert_no_writes_left(saver, "t")


@pytest.fixture(params=DURABILITIES)
def durability(request: pytest.FixtureRequest) -> Durability:
    mode: Durability = request.param
    return mode
