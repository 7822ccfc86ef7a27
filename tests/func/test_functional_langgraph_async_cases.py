"""LangGraph's async functional-API tests (libs/langgraph/tests/test_pregel_async.py),
ported to plait's API and run on every backend (see test_functional_langgraph_cases.py for
what differs and why). Sleeps that made LangGraph's cases wait are events here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait import Checkpointer, Command, entrypoint, interrupt, task


@pytest.fixture
def saver(make_saver: Callable[..., Checkpointer]) -> Checkpointer:
    return make_saver()


def test_imp_task_cancel(saver: Checkpointer) -> None:
    mapper_calls = 0
    mapper_cancels = 0

    @task()
    async def mapper(input: int, started: asyncio.Event) -> str:
        nonlocal mapper_calls, mapper_cancels
        mapper_calls += 1
        if input == 1:
            started.set()
            try:
                await asyncio.Event().wait()  # until cancelled
            except asyncio.CancelledError:
                mapper_cancels += 1
                raise
        return str(input) * 2

    @entrypoint(checkpointer=saver)
    async def graph(input: list[int]) -> list[str]:
        started = asyncio.Event()
        futures = [mapper(i, started) for i in input]
        await started.wait()
        assert futures.pop().cancel()  # cancel one
        mapped = await asyncio.gather(*futures)
        answer = interrupt("question")
        return [m + answer for m in mapped]

    async def go() -> None:
        items = [c async for c in graph.astream([0, 1], thread_id="1")]
        assert items[0] == {"mapper": "00"}
        assert [i.value for i in items[1]["__interrupt__"]] == ["question"]
        assert (mapper_calls, mapper_cancels) == (2, 1)
        assert await graph.ainvoke(Command(resume="answer"), thread_id="1") == ["00answer"]
        assert (mapper_calls, mapper_cancels) == (3, 2), "the cancelled call was not recorded: it ran again"

    asyncio.run(go())


def test_imp_sync_from_async(saver: Checkpointer) -> None:
    @task()
    def foo(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": state["a"] + "foo", "b": "bar"}

    @task
    def bar(a: str, b: str, c: str | None = None) -> dict[str, Any]:
        return {"a": a + b, "c": (c or "") + "bark"}

    @task()
    def baz(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": state["a"] + "baz", "c": "something else"}

    @entrypoint(checkpointer=saver)
    def graph(state: dict[str, Any]) -> dict[str, Any]:
        foo_result = foo(state).result()
        fut_bar = bar(foo_result["a"], foo_result["b"])
        return baz(fut_bar.result()).result()

    async def go() -> list[Any]:
        return [c async for c in graph.astream({"a": "0"}, thread_id="1")]

    assert asyncio.run(go()) == [
        {"foo": {"a": "0foo", "b": "bar"}},
        {"bar": {"a": "0foobar", "c": "bark"}},
        {"baz": {"a": "0foobarbaz", "c": "something else"}},
        {"graph": {"a": "0foobarbaz", "c": "something else"}},
    ]


def test_handles_multiple_interrupts_from_tasks(saver: Checkpointer) -> None:
    @task
    async def add_participant(name: str) -> str:
        feedback = interrupt(f"Hey do you want to add {name}?")
        if feedback is False:
            return f"The user changed their mind and doesn't want to add {name}!"
        if feedback is True:
            return f"Added {name}!"
        raise ValueError("Invalid feedback")

    @entrypoint(checkpointer=saver)
    async def program(_state: Any) -> list[str]:
        first = await add_participant("James")
        second = await add_participant("Will")
        return [first, second]

    async def go() -> None:
        config = {"configurable": {"thread_id": "1"}}
        result = await program.ainvoke("this is ignored", config=config)
        assert [i.value for i in result["__interrupt__"]] == ["Hey do you want to add James?"]
        state = await program.aget_state(config)
        assert [i.value for i in state.tasks[0].interrupts] == ["Hey do you want to add James?"]

        interrupts = [e async for e in program.astream(Command(resume=True), config) if "__interrupt__" in e]
        assert len(interrupts) == 1, "surfaced once"
        state = await program.aget_state(config)
        assert [i.value for i in state.tasks[0].interrupts] == ["Hey do you want to add Will?"]

        result = await program.ainvoke(Command(resume=True), config=config)
        assert result == ["Added James!", "Added Will!"]

    asyncio.run(go())


def test_multiple_subgraphs_functional(saver: Checkpointer) -> None:
    @entrypoint()
    async def add(inputs: list[int]) -> int:
        a, b = inputs
        return a + b

    @task
    async def multiply_task(a: int, b: int) -> int:
        return a * b

    @entrypoint()
    async def multiply(inputs: list[int]) -> int:
        return await multiply_task(*inputs)

    @task
    async def call_same_subgraph(a: int, b: int) -> int:
        result = await add.ainvoke([a, b])
        return int(await add.ainvoke([result, 10]))

    @entrypoint(checkpointer=saver)
    async def parent_call_same_subgraph(inputs: list[int]) -> int:
        return await call_same_subgraph(*inputs)

    @task
    async def call_multiple_subgraphs(a: int, b: int) -> list[int]:
        return [await add.ainvoke([a, b]), await multiply.ainvoke([a, b])]

    @entrypoint(checkpointer=saver)
    async def parent_call_multiple_subgraphs(inputs: list[int]) -> list[int]:
        return await call_multiple_subgraphs(*inputs)

    async def go() -> None:
        assert await parent_call_same_subgraph.ainvoke([2, 3], thread_id="1") == 15
        assert await parent_call_multiple_subgraphs.ainvoke([2, 3], thread_id="2") == [5, 6]

    asyncio.run(go())
