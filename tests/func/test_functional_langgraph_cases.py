"""LangGraph's own functional-API tests (libs/langgraph/tests/test_pregel.py), ported to
plait's API and run on every backend: what a ported ``@entrypoint``/``@task`` program sees.

Differences from LangGraph's originals are plait's and deliberate: values are JSON data (a
task returning a tuple gives a list), the thread is named with ``thread_id=`` (LangGraph's
``config`` is accepted too), interrupts are plait's ``Interrupt`` records."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from plait import Checkpointer, Command, Interrupt, entrypoint, interrupt, task


@pytest.fixture
def saver(make_saver: Callable[..., Checkpointer]) -> Checkpointer:
    return make_saver()


def test_imp_task(saver: Checkpointer) -> None:
    mapper_calls = 0

    @task()
    def mapper(input: int) -> str:
        nonlocal mapper_calls
        mapper_calls += 1
        return str(input) * 2

    @entrypoint(checkpointer=saver)
    def graph(input: list[int]) -> list[str]:
        futures = [mapper(i) for i in input]
        mapped = [f.result() for f in futures]
        answer = interrupt("question")
        return [m + answer for m in mapped]

    thread1 = {"configurable": {"thread_id": "1"}}
    result = [*graph.stream([0, 1], thread1)]
    assert sorted(result[:-1], key=str) == [{"mapper": "00"}, {"mapper": "11"}]
    (pause,) = result[-1]["__interrupt__"]
    assert isinstance(pause, Interrupt) and pause.value == "question"
    assert mapper_calls == 2

    assert graph.invoke(Command(resume="answer"), thread1) == ["00answer", "11answer"]
    assert mapper_calls == 2


def test_imp_nested(saver: Checkpointer) -> None:
    @task
    def submapper(input: int) -> str:
        return str(input)

    @task()
    def mapper(input: int) -> str:
        sub = submapper(input)
        return sub.result() * 2

    @entrypoint(checkpointer=saver)
    def graph(input: list[int]) -> list[str]:
        futures = [mapper(i) for i in input]
        mapped = [f.result() for f in futures]
        answer = interrupt("question")
        return [m + answer + "a" for m in mapped]

    result = [*graph.stream([0, 1], thread_id="1")]
    assert sorted(result[:-1], key=str) == [
        {"mapper": "00"},
        {"mapper": "11"},
        {"submapper": "0"},
        {"submapper": "1"},
    ]
    assert "__interrupt__" in result[-1]
    assert graph.invoke(Command(resume="answer"), thread_id="1") == ["00answera", "11answera"]


def test_imp_stream_order(saver: Checkpointer) -> None:
    @task()
    def foo(state: dict[str, Any]) -> tuple[str, str]:
        return state["a"] + "foo", "bar"

    @task
    def bar(a: str, b: str, c: str | None = None) -> dict[str, Any]:
        return {"a": a + b, "c": (c or "") + "bark"}

    @task
    def baz(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": state["a"] + "baz", "c": "something else"}

    @entrypoint(checkpointer=saver)
    def graph(state: dict[str, Any]) -> dict[str, Any]:
        fut_foo = foo(state)
        fut_bar = bar(*fut_foo.result())
        fut_baz = baz(fut_bar.result())
        return fut_baz.result()

    assert [*graph.stream({"a": "0"}, thread_id="1")] == [
        {"foo": ["0foo", "bar"]},  # a tuple is JSON's list
        {"bar": {"a": "0foobar", "c": "bark"}},
        {"baz": {"a": "0foobarbaz", "c": "something else"}},
        {"graph": {"a": "0foobarbaz", "c": "something else"}},
    ]
    assert graph.get_state("1").values == {"a": "0foobarbaz", "c": "something else"}


def test_interrupt_functional(saver: Checkpointer) -> None:
    @task
    def foo(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": state["a"] + "foo"}

    @task
    def bar(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": state["a"] + "bar", "b": state["b"]}

    @entrypoint(checkpointer=saver)
    def graph(inputs: dict[str, Any]) -> dict[str, Any]:
        fut_foo = foo(inputs)
        value = interrupt("Provide value for bar:")
        bar_input = {**fut_foo.result(), "b": value}
        return bar(bar_input).result()

    first = graph.invoke({"a": ""}, thread_id="1")
    assert [i.value for i in first["__interrupt__"]] == ["Provide value for bar:"]
    assert graph.invoke(Command(resume="bar"), thread_id="1") == {"a": "foobar", "b": "bar"}


def test_interrupt_task_functional(saver: Checkpointer) -> None:
    @task
    def foo(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": state["a"] + "foo"}

    @task
    def bar(state: dict[str, Any]) -> dict[str, Any]:
        value = interrupt("Provide value for bar:")
        return {"a": state["a"] + value}

    @entrypoint(checkpointer=saver)
    def graph(inputs: dict[str, Any]) -> dict[str, Any]:
        return bar(foo(inputs).result()).result()

    first = graph.invoke({"a": ""}, thread_id="1")
    assert [i.value for i in first["__interrupt__"]] == ["Provide value for bar:"]
    assert graph.invoke(Command(resume="bar"), thread_id="1") == {"a": "foobar"}

    # the same task interrupting twice, once per call
    @entrypoint(checkpointer=saver)
    def graph2(inputs: dict[str, Any]) -> dict[str, Any]:
        foo_result = foo(inputs).result()
        bar_result = bar(foo_result).result()
        return bar(bar_result).result()

    assert "__interrupt__" in graph2.invoke({"a": ""}, thread_id="2")
    assert "__interrupt__" in graph2.invoke(Command(resume="bar"), thread_id="2")
    assert graph2.invoke(Command(resume="baz"), thread_id="2") == {"a": "foobarbaz"}


def test_multiple_interrupts_functional(saver: Checkpointer) -> None:
    counter = 0

    @task
    def double(x: int) -> int:
        nonlocal counter
        counter += 1
        return 2 * x

    @entrypoint(checkpointer=saver)
    def graph(state: dict[str, Any]) -> dict[str, Any]:
        values: list[Any] = []
        for idx in [1, 2, 3]:
            values.extend([double(idx).result(), interrupt({"a": "boo"})])
        return {"values": values}

    t = str(uuid.uuid4())
    graph.invoke({}, thread_id=t)
    graph.invoke(Command(resume="a"), thread_id=t)
    graph.invoke(Command(resume="b"), thread_id=t)
    assert graph.invoke(Command(resume="c"), thread_id=t) == {"values": [2, "a", 4, "b", 6, "c"]}
    assert counter == 3, "each double() ran once: replayed from its record afterwards"


def test_task_before_interrupt_resume(saver: Checkpointer) -> None:
    @entrypoint(checkpointer=saver)
    def workflow(number_of_topics: int) -> dict[str, Any]:
        @task
        def setup() -> int:
            return number_of_topics

        @task
        def ask(question: str) -> str:
            answer: str = interrupt(question)
            return answer

        n = setup().result()
        answers = [ask(f"Whats the answer for topic {i + 1}?").result() for i in range(n)]
        return {"answers": answers}

    result = workflow.invoke(2, thread_id="1")
    assert [i.value for i in result["__interrupt__"]] == ["Whats the answer for topic 1?"]
    result = workflow.invoke(Command(resume="answer1"), thread_id="1")
    assert [i.value for i in result["__interrupt__"]] == ["Whats the answer for topic 2?"]
    assert workflow.invoke(Command(resume="answer2"), thread_id="1") == {"answers": ["answer1", "answer2"]}


def test_multiple_tasks_before_interrupt_resume(saver: Checkpointer) -> None:
    @entrypoint(checkpointer=saver)
    def workflow(inputs: dict[str, Any]) -> dict[str, Any]:
        @task
        def step_a(x: int) -> int:
            return x + 1

        @task
        def step_b(x: int) -> int:
            return x * 2

        @task
        def ask(question: str) -> Any:
            return interrupt(question)

        a = step_a(inputs["x"]).result()
        b = step_b(a).result()
        return {"computed": b, "answer": ask(f"Result so far is {b}. What next?").result()}

    result = workflow.invoke({"x": 5}, thread_id="1")
    assert result["__interrupt__"][0].value == "Result so far is 12. What next?"
    assert workflow.invoke(Command(resume="continue"), thread_id="1") == {"computed": 12, "answer": "continue"}


def test_entrypoint_without_checkpointer() -> None:
    @entrypoint()
    def foo(inputs: Any) -> Any:
        return inputs

    assert foo.invoke({"a": "1"}) == {"a": "1"}

    @entrypoint()
    def bar(inputs: Any, *, previous: Any) -> Any:
        return {"previous": previous, "current": inputs}

    assert bar.invoke({"a": "1"}) == {"current": {"a": "1"}, "previous": None}
    assert bar.invoke({"a": "1"}) == {"current": {"a": "1"}, "previous": None}


def test_entrypoint_stateful(saver: Checkpointer) -> None:
    states: list[Any] = []

    @entrypoint(checkpointer=saver)
    def foo(inputs: Any, *, previous: Any) -> Any:
        states.append(previous)
        return {"previous": previous, "current": inputs}

    assert foo.invoke({"a": "1"}, thread_id="1") == {"current": {"a": "1"}, "previous": None}
    assert foo.invoke({"a": "2"}, thread_id="1") == {
        "current": {"a": "2"},
        "previous": {"current": {"a": "1"}, "previous": None},
    }
    assert states == [None, {"current": {"a": "1"}, "previous": None}]
    assert [*foo.stream({"a": "1"}, thread_id="2")] == [{"foo": {"current": {"a": "1"}, "previous": None}}]


def test_entrypoint_stateful_update_state(saver: Checkpointer) -> None:
    states: list[Any] = []

    @entrypoint(checkpointer=saver)
    def foo(inputs: Any, *, previous: Any) -> Any:
        states.append(previous)
        return {"previous": previous, "current": inputs}

    foo.update_state("1", {"a": "-1"})
    assert foo.invoke({"a": "1"}, thread_id="1") == {"current": {"a": "1"}, "previous": {"a": "-1"}}
    foo.update_state({"configurable": {"thread_id": "1"}}, {"a": "3"})
    assert [*foo.stream({"a": "1"}, thread_id="1")] == [{"foo": {"current": {"a": "1"}, "previous": {"a": "3"}}}]
    assert states == [{"a": "-1"}, {"a": "3"}]


def test_entrypoint_from_sync_generator() -> None:
    from plait.errors import EntrypointSignatureError

    with pytest.raises(EntrypointSignatureError, match="generator"):

        @entrypoint()
        def foo(inputs: Any, previous: Any = None) -> Any:
            yield "a"


def test_entrypoint_with_return_and_save(saver: Checkpointer) -> None:
    seen: list[Any] = []

    @entrypoint(checkpointer=saver)
    def foo(msg: str, *, previous: Any) -> entrypoint.final[int, list[str]]:
        seen.append(previous)
        previous = previous or []
        return entrypoint.final(value=len(previous), save=[*previous, msg])

    assert foo.invoke("hello", thread_id="1") == 0
    assert foo.invoke("goodbye", thread_id="1") == 1
    assert foo.invoke("definitely", thread_id="1") == 2
    assert seen == [None, ["hello"], ["hello", "goodbye"]]


def test_entrypoint_final_must_name_both_types() -> None:
    with pytest.raises(TypeError):
        entrypoint.final[int]  # type: ignore[misc]  # noqa: B018


def test_named_tasks_functional() -> None:
    class Foo:
        def foo(self, value: str) -> str:
            return value + "foo"

    f = Foo()
    foo = task(f.foo, name="custom_foo")
    other_foo = task(f.foo, name="other_foo")

    @task(name="custom_bar")
    def bar(value: str) -> str:
        return value + "|bar"

    def baz(update: str, value: str) -> str:
        return value + f"|{update}"

    baz_task = task(functools.partial(baz, "baz"))
    custom_baz_task = task(functools.partial(baz, "custom_baz"), name="custom_baz")

    class Qux:
        def __call__(self, value: str) -> str:
            return value + "|qux"

    qux_task = task(Qux(), name="qux")

    @entrypoint()
    def workflow(inputs: str) -> str:
        foo_result = foo(inputs).result()
        other_foo(inputs).result()
        fut_bar = bar(foo_result)
        fut_baz = baz_task(fut_bar.result())
        fut_custom_baz = custom_baz_task(fut_baz.result())
        return qux_task(fut_custom_baz.result()).result()

    assert list(workflow.stream("", stream_mode="updates")) == [
        {"custom_foo": "foo"},
        {"other_foo": "foo"},
        {"custom_bar": "foo|bar"},
        {"baz": "foo|bar|baz"},
        {"custom_baz": "foo|bar|baz|custom_baz"},
        {"qux": "foo|bar|baz|custom_baz|qux"},
        {"workflow": "foo|bar|baz|custom_baz|qux"},
    ]


def test_imp_exception(saver: Checkpointer) -> None:
    @task()
    def my_task(number: int) -> int:
        return number * 2

    @task()
    def task_with_exception(number: int) -> int:
        raise Exception("This is a test exception")

    @entrypoint(checkpointer=saver)
    def my_workflow(number: int) -> str:
        my_task(number).result()
        try:
            task_with_exception(number).result()
        except Exception as e:
            assert str(e) == "This is a test exception"
        my_task(number).result()
        return "done"

    assert my_workflow.invoke(1, thread_id="1") == "done"
    assert [*my_workflow.stream(1, thread_id="1")] == [{"my_task": 2}, {"my_task": 2}, {"my_workflow": "done"}]


def test_async_tasks_gathered(saver: Checkpointer) -> None:
    """LangGraph's async example: ``await asyncio.gather(*futures)``."""
    import asyncio

    @task
    async def add_one(a: int) -> int:
        return a + 1

    @entrypoint(checkpointer=saver)
    async def add_all(numbers: list[int]) -> list[int]:
        return list(await asyncio.gather(*[add_one(n) for n in numbers]))

    assert asyncio.run(add_all.ainvoke([1, 2, 3], thread_id="1")) == [2, 3, 4]
