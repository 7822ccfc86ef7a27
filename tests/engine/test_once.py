"""The effects ledger: ctx.once / ctx.aonce run a side effect at most once per task, across
an interrupt, a failure and a retry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait import (
    START,
    AppendList,
    Command,
    Graph,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    RetryPolicy,
    StateSchema,
    interrupt,
)


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww("receipt").add_lww("answer").build()


def recorder(calls: list[Any], item: Any, result: Any) -> Callable[[], Any]:
    """An effect that appends ``item`` to ``calls`` and returns ``result``."""

    def effect() -> Any:
        calls.append(item)
        return result() if callable(result) else result

    return effect


def single(fn: Any, **kwargs: Any) -> Any:
    return Graph(schema()).add_node("pay", fn, **kwargs).add_edge(START, "pay").compile(MemoryCheckpointer())


def test_once_in_a_sync_node_is_not_repeated_after_an_interrupt_and_resume() -> None:
    charges: list[int] = []

    def charge() -> dict[str, Any]:
        charges.append(1)
        return {"charge_id": f"ch-{len(charges)}"}

    def pay(state: Any, ctx: NodeContext) -> Any:
        receipt = ctx.once("charge", charge)
        answer = interrupt("confirm?")
        return {"receipt": receipt, "answer": answer}

    app = single(pay)
    assert "__interrupt__" in app.invoke({}, thread_id="t")
    assert len(charges) == 1
    out = app.invoke(Command(resume="ok"), thread_id="t")
    assert len(charges) == 1, "the recorded result is returned, the effect is not repeated"
    assert out["receipt"] == {"charge_id": "ch-1"}
    assert out["answer"] == "ok"


def test_aonce_in_an_async_node_is_not_repeated_after_an_interrupt_and_resume() -> None:
    charges: list[int] = []

    async def charge() -> str:
        await asyncio.sleep(0)
        charges.append(1)
        return f"ch-{len(charges)}"

    async def pay(state: Any, ctx: NodeContext) -> Any:
        receipt = await ctx.aonce("charge", charge)
        answer = interrupt("confirm?")
        return {"receipt": receipt, "answer": answer}

    app = single(pay)
    app.invoke({}, thread_id="t")
    out = asyncio.run(app.ainvoke(Command(resume="ok"), thread_id="t"))
    assert len(charges) == 1
    assert out["receipt"] == "ch-1"


def test_aonce_accepts_a_sync_function() -> None:
    calls: list[int] = []

    async def pay(state: Any, ctx: NodeContext) -> Any:
        return {"receipt": await ctx.aonce("charge", recorder(calls, 1, "sync-result"))}

    assert single(pay).invoke({}, thread_id="t")["receipt"] == "sync-result"
    assert calls == [1]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_once_is_not_repeated_when_the_node_fails_later_and_is_resumed(kind: str) -> None:
    charges: list[int] = []
    broken = [True]

    def charge() -> str:
        charges.append(1)
        return "ch"

    def after_effect() -> None:
        if broken[0]:
            raise RuntimeError("crashed after charging")

    def sync_pay(state: Any, ctx: NodeContext) -> Any:
        receipt = ctx.once("charge", charge)
        after_effect()
        return {"receipt": receipt}

    async def async_pay(state: Any, ctx: NodeContext) -> Any:
        receipt = await ctx.aonce("charge", charge)
        after_effect()
        return {"receipt": receipt}

    app = single(sync_pay if kind == "sync" else async_pay)
    with pytest.raises(NodeError):
        app.invoke({}, thread_id="t")
    assert len(charges) == 1
    broken[0] = False
    assert app.invoke(None, thread_id="t")["receipt"] == "ch"
    assert len(charges) == 1


def test_once_is_not_repeated_by_a_retry() -> None:
    charges: list[int] = []
    attempts = [0]

    def pay(state: Any, ctx: NodeContext) -> Any:
        attempts[0] += 1
        receipt = ctx.once("charge", recorder(charges, 1, "ch"))
        if attempts[0] < 3:
            raise ConnectionError("flaky after charging")
        return {"receipt": receipt}

    app = single(pay, retry=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0))
    assert app.invoke({}, thread_id="t")["receipt"] == "ch"
    assert attempts[0] == 3
    assert len(charges) == 1


def test_different_names_are_different_effects() -> None:
    calls = {"a": 0, "b": 0}

    def effect(name: str) -> Any:
        def run() -> str:
            calls[name] += 1
            return f"{name}{calls[name]}"

        return run

    def pay(state: Any, ctx: NodeContext) -> Any:
        first = ctx.once("a", effect("a"))
        second = ctx.once("b", effect("b"))
        again = ctx.once("a", effect("a"))
        answer = interrupt("go?")
        return {"log": [first, second, again], "answer": answer}

    app = single(pay)
    app.invoke({}, thread_id="t")
    out = app.invoke(Command(resume="go"), thread_id="t")
    assert calls == {"a": 1, "b": 1}
    assert out["log"] == ["a1", "b1", "a1"]


def test_each_task_has_its_own_ledger() -> None:
    calls: list[str] = []

    def pay(state: Any, ctx: NodeContext) -> Any:
        return {"log": [ctx.once("charge", recorder(calls, ctx.node, ctx.node))]}

    g = Graph(schema()).add_node("x", pay).add_node("y", pay).add_edge(START, "x").add_edge(START, "y")
    out = g.compile(MemoryCheckpointer()).invoke({}, thread_id="t")
    assert sorted(calls) == ["x", "y"]
    assert out["log"] == ["x", "y"]


def test_a_new_run_on_the_thread_performs_the_effect_again() -> None:
    calls: list[int] = []

    def pay(state: Any, ctx: NodeContext) -> Any:
        return {"receipt": ctx.once("charge", recorder(calls, 1, lambda: len(calls)))}

    app = single(pay)
    assert app.invoke({}, thread_id="t")["receipt"] == 1
    assert app.invoke({}, thread_id="t")["receipt"] == 2, "a new input is a new task, not a re-run"


def test_once_works_without_a_checkpointer_within_one_run() -> None:
    calls: list[int] = []

    def pay(state: Any, ctx: NodeContext) -> Any:
        first = ctx.once("charge", recorder(calls, 1, "ch"))
        second = ctx.once("charge", recorder(calls, 1, "other"))
        return {"log": [first, second]}

    app = Graph(schema()).add_node("pay", pay).add_edge(START, "pay").compile()
    assert app.invoke({})["log"] == ["ch", "ch"]
    assert calls == [1]
