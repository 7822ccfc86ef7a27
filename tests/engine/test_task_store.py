"""``ctx.store`` inside a graph: a node's memory writes are staged with its task and reach
the store with its step's commit, never before, never twice; the node reads its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    Checkpointer,
    Command,
    Graph,
    LeaseLostError,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    NoStoreError,
    PostgresCheckpointer,
    RetryPolicy,
    SqliteCheckpointer,
    StateSchema,
    Store,
    interrupt,
)
from plait.testing import ManualClock

from ._intruder import try_to_take_lease


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).build()


def test_a_node_remembers_across_threads() -> None:
    cp = MemoryCheckpointer()

    def remember(state: Any, ctx: NodeContext) -> Any:
        ctx.store.put(("users", "u1"), "pref", {"color": "blue", "thread": ctx.thread_id})
        return {"log": ["saved"]}

    def recall(state: Any, ctx: NodeContext) -> Any:
        item = ctx.store.get(("users", "u1"), "pref")
        return {"log": [item.value["color"] if item is not None else "nothing"]}

    g1 = Graph(schema()).add_node("remember", remember).add_edge(START, "remember").add_edge("remember", END)
    g2 = Graph(schema()).add_node("recall", recall).add_edge(START, "recall").add_edge("recall", END)
    g1.compile(cp, store=True).invoke({}, thread_id="t1")
    assert g2.compile(cp, store=cp.store).invoke({}, thread_id="t2")["log"] == ["blue"]
    item = cp.store.get(("users", "u1"), "pref")
    assert item is not None and item.value == {"color": "blue", "thread": "t1"}


def test_a_memory_is_invisible_to_siblings_until_the_step_commits_and_a_node_sees_its_own() -> None:
    cp = MemoryCheckpointer()
    seen: dict[str, Any] = {}

    async def writer(state: Any, ctx: NodeContext) -> Any:
        await ctx.store.aput(("m",), "k", {"v": 1, "tag": "x"})
        own = await ctx.store.aget(("m",), "k")
        found = await ctx.store.asearch(("m",), filter={"tag": "x"})
        seen["own"] = (own.value if own else None, [i.key for i in found])
        await asyncio.sleep(0.01)  # the sibling reads while this task's write is staged
        return {"log": ["w"]}

    async def reader(state: Any, ctx: NodeContext) -> Any:
        seen["sibling"] = await ctx.store.aget(("m",), "k")
        await asyncio.sleep(0.02)
        seen["sibling_later"] = await ctx.store.aget(("m",), "k")
        return {"log": ["r"]}

    async def after(state: Any, ctx: NodeContext) -> Any:
        item = await ctx.store.aget(("m",), "k")
        seen["next_step"] = item.value if item else None
        return {"log": ["a"]}

    g = Graph(schema()).add_node("writer", writer).add_node("reader", reader).add_node("after", after)
    g.add_edge(START, "writer").add_edge(START, "reader").add_edge(["writer", "reader"], "after").add_edge("after", END)
    g.compile(cp, store=True).invoke({}, thread_id="t")
    assert seen["own"] == ({"v": 1, "tag": "x"}, ["k"])
    assert seen["sibling"] is None and seen["sibling_later"] is None
    assert seen["next_step"] == {"v": 1, "tag": "x"}


def test_a_failed_sibling_keeps_finished_memory_back_until_the_step_commits_and_never_twice() -> None:
    cp = MemoryCheckpointer()
    calls = {"ok": 0, "flaky": 0}
    broken = [True]

    def ok(state: Any, ctx: NodeContext) -> Any:
        calls["ok"] += 1
        ctx.store.put(("m",), "ok", {"call": calls["ok"]})
        return {"log": ["ok"]}

    def flaky(state: Any, ctx: NodeContext) -> Any:
        calls["flaky"] += 1
        ctx.store.put(("m",), "flaky", {"call": calls["flaky"]})
        if broken[0]:
            raise RuntimeError("boom")
        return {"log": ["flaky"]}

    g = Graph(schema()).add_node("ok", ok).add_node("flaky", flaky)
    g.add_edge(START, "ok").add_edge(START, "flaky").add_edge("ok", END).add_edge("flaky", END)
    app = g.compile(cp, store=True)
    with pytest.raises(NodeError):
        app.invoke({}, thread_id="t")
    assert cp.store.search(()) == []  # the finished task's memory waits for its step
    broken[0] = False
    app.invoke(None, thread_id="t")
    assert calls == {"ok": 1, "flaky": 2}  # the finished task did not run again
    items = {i.key: i.value for i in cp.store.search(())}
    assert items == {"ok": {"call": 1}, "flaky": {"call": 2}}


def test_an_interrupted_task_writes_its_memory_once_when_it_finishes() -> None:
    cp = MemoryCheckpointer()

    def ask(state: Any, ctx: NodeContext) -> Any:
        ctx.store.put(("m",), "before", {"n": 1})
        answer = interrupt("name?")
        ctx.store.put(("m",), "answer", {"name": answer})
        return {"log": [answer]}

    g = Graph(schema()).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
    app = g.compile(cp, store=True)
    app.invoke({}, thread_id="t")
    assert cp.store.search(()) == []
    app.invoke(Command(resume="Ada"), thread_id="t")
    assert {i.key: i.value for i in cp.store.search(())} == {"before": {"n": 1}, "answer": {"name": "Ada"}}


def test_a_retried_attempt_drops_the_failed_attempts_memory() -> None:
    cp = MemoryCheckpointer()
    attempts = [0]

    def node(state: Any, ctx: NodeContext) -> Any:
        attempts[0] += 1
        ctx.store.put(("m",), f"attempt{attempts[0]}", {"n": attempts[0]})
        if attempts[0] == 1:
            raise RuntimeError("once")
        return {"log": ["done"]}

    g = Graph(schema()).add_node("n", node, retry=RetryPolicy(max_attempts=2, initial_interval=0.0))
    g.add_edge(START, "n").add_edge("n", END)
    g.compile(cp, store=True).invoke({}, thread_id="t")
    assert [i.key for i in cp.store.search(())] == ["attempt2"]


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_every_durability_commits_the_memory_of_every_step(durability: str) -> None:
    cp = MemoryCheckpointer()

    def step(name: str) -> Any:
        def fn(state: Any, ctx: NodeContext) -> Any:
            ctx.store.put(("m",), name, {"after": [i.key for i in ctx.store.search(())]})
            return {"log": [name]}

        return fn

    g = Graph(schema()).add_node("a", step("a")).add_node("b", step("b"))
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    g.compile(cp, store=True).invoke({}, thread_id="t", durability=durability)  # type: ignore[call-overload]
    # b reads a's memory whether or not a's step is committed yet (async, exit): as a's state
    items = {i.key: i.value for i in cp.store.search(())}
    assert items == {"a": {"after": []}, "b": {"after": ["a"]}}


def test_a_store_elsewhere_and_a_run_without_a_checkpointer_get_the_memory_too() -> None:
    for cp in (MemoryCheckpointer(), None):
        store = Store()

        def node(state: Any, ctx: NodeContext) -> Any:
            ctx.store.put(("m",), "k", {"v": 1})
            return {"log": ["x"]}

        g = Graph(schema()).add_node("n", node).add_edge(START, "n").add_edge("n", END)
        app = g.compile(cp, store=store)
        app.invoke({}, thread_id="t") if cp is not None else app.invoke({})
        item = store.get(("m",), "k")
        assert item is not None and item.value == {"v": 1}


def test_ctx_store_without_a_store_says_how_to_give_one() -> None:
    def node(state: Any, ctx: NodeContext) -> Any:
        ctx.store.get(("m",), "k")
        return {}

    g = Graph(schema()).add_node("n", node).add_edge(START, "n").add_edge("n", END)
    with pytest.raises(NodeError) as info:
        g.compile().invoke({})
    assert isinstance(info.value.__cause__, NoStoreError)
    assert "store=cp.store" in str(info.value.__cause__)


def test_bind_moves_a_checkpointers_own_store_with_it() -> None:
    first, second = MemoryCheckpointer(), MemoryCheckpointer()

    def node(state: Any, ctx: NodeContext) -> Any:
        ctx.store.put(("m",), "k", {"v": 1})
        return {}

    g = Graph(schema()).add_node("n", node).add_edge(START, "n").add_edge("n", END)
    g.compile(first, store=True).bind(checkpointer=second).invoke({}, thread_id="t")
    assert first.store.get(("m",), "k") is None
    assert second.store.get(("m",), "k") is not None


def _backends(tmp_path: Path, request: pytest.FixtureRequest, kind: str) -> tuple[Checkpointer, ManualClock]:
    clock = ManualClock()
    if kind == "memory":
        return MemoryCheckpointer(clock=clock), clock
    if kind == "sqlite":
        return SqliteCheckpointer(tmp_path / "m.db", clock=clock), clock
    saver = PostgresCheckpointer(
        request.getfixturevalue("postgres_dsn"), schema=request.getfixturevalue("postgres_schema"), clock=clock
    )
    saver.migrate()
    return saver, clock


@pytest.mark.parametrize("kind", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_step_whose_commit_the_fence_refuses_stores_none_of_its_memory(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    saver, clock = _backends(tmp_path, request, kind)

    def node(state: Any, ctx: NodeContext) -> Any:
        ctx.store.put(("m",), "k", {"v": 1})
        clock.advance(saver.lease_ttl + 1)  # the lease lapses, and another process takes the thread
        assert try_to_take_lease(saver, "t") == "taken"
        return {"log": ["x"]}

    g = Graph(schema()).add_node("n", node).add_edge(START, "n").add_edge("n", END)
    try:
        with pytest.raises(LeaseLostError):
            g.compile(saver, store=True).invoke({}, thread_id="t", durability="sync")
        assert saver.store.get(("m",), "k") is None, "a memory of a refused step was stored"
    finally:
        asyncio.run(saver.aclose())
