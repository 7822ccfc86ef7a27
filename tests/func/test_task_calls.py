"""plait.task calls: concurrent, recorded as each finishes, replayed on resume (after an
interrupt, a failure, a retry), refused where they cannot be durable; from an entrypoint
(sync or async) and from a graph's node."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from plait import (
    START,
    AppendList,
    Checkpointer,
    Command,
    Graph,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    RetryPolicy,
    StateSchema,
    Store,
    entrypoint,
    interrupt,
    task,
)
from plait.errors import (
    EntrypointSignatureError,
    TaskOutsideRunError,
    TaskReplayError,
    TaskResultError,
    TaskWaitOnLoopError,
)


@pytest.fixture
def saver(make_saver: Callable[..., Checkpointer]) -> Checkpointer:
    return make_saver()


def test_a_failed_run_resumes_without_running_its_finished_tasks_again(saver: Checkpointer) -> None:
    ran: list[int] = []
    fail = {"now": True}

    @task
    def square(x: int) -> int:
        ran.append(x)
        return x * x

    @entrypoint(checkpointer=saver)
    def squares(xs: list[int]) -> int:
        total = sum(f.result() for f in [square(x) for x in xs])
        if fail["now"]:
            raise RuntimeError("the model timed out")
        return total

    with pytest.raises(NodeError, match="the model timed out"):
        squares.invoke([1, 2, 3], thread_id="t")
    assert sorted(ran) == [1, 2, 3]
    fail["now"] = False
    assert squares.invoke(None, thread_id="t") == 14
    assert sorted(ran) == [1, 2, 3], "the recorded results were replayed"
    assert squares.get_state("t").status == "idle"


def test_calls_made_before_waiting_run_at_the_same_time(saver: Checkpointer) -> None:
    both = threading.Barrier(2, timeout=20)  # a sync task alone would wait here until it breaks

    @task
    def meet(x: int) -> int:
        both.wait()
        return x

    @task
    async def ameet(x: int, ready: list[asyncio.Event]) -> int:
        ready[x].set()
        await asyncio.wait_for(ready[1 - x].wait(), 20)
        return x

    @entrypoint(checkpointer=saver)
    def sync_flow(_: Any) -> list[int]:
        futures = [meet(0), meet(1)]
        return [f.result() for f in futures]

    @entrypoint(checkpointer=saver)
    async def async_flow(_: Any) -> list[int]:
        ready = [asyncio.Event(), asyncio.Event()]
        futures = [ameet(0, ready), ameet(1, ready)]
        return [await f for f in futures]

    assert sync_flow.invoke(None or {}, thread_id="s") == [0, 1]
    assert async_flow.invoke({}, thread_id="a") == [0, 1]


def test_sync_and_async_tasks_mix_in_sync_and_async_entrypoints() -> None:
    @task
    def inc(x: int) -> int:
        return x + 1

    @task
    async def double(x: int) -> int:
        return x * 2

    @entrypoint()
    def plain(x: int) -> int:
        return double(inc(x).result()).result()

    @entrypoint()
    async def coro(x: int) -> int:
        return await double(await inc(x))

    assert plain.invoke(1) == 4
    assert asyncio.run(coro.ainvoke(1)) == 4


def test_an_unfinished_future_read_with_result_on_the_loop_is_refused() -> None:
    gate = threading.Event()

    @task
    def slow() -> int:
        gate.wait(20)
        return 1

    @entrypoint()
    async def flow(_: Any) -> int:
        future = slow()
        try:
            future.result()
        finally:
            gate.set()
        return 0

    with pytest.raises(NodeError) as caught:
        flow.invoke({})
    assert isinstance(caught.value.__cause__, TaskWaitOnLoopError)
    assert "await future" in str(caught.value.__cause__)


def test_a_task_result_that_is_not_json_is_refused_with_its_name(saver: Checkpointer) -> None:
    @task
    def fetch() -> Any:
        return {"when": object()}

    @entrypoint(checkpointer=saver)
    def flow(_: Any) -> Any:
        return fetch().result()

    with pytest.raises(TaskResultError, match=r"task 'fetch' \(called in 'flow'\)") as caught:
        flow.invoke({}, thread_id="t")
    assert caught.value.task == "fetch" and caught.value.type_name == "object"
    assert flow.get_state("t").status == "error"


def test_a_task_called_outside_a_run_is_refused_and_its_function_stays_callable() -> None:
    @task
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(TaskOutsideRunError, match=r"add\.func\(\.\.\.\)"):
        add(1, 2)
    assert add.func(1, 2) == 3
    assert add.name == "add" and add.__wrapped__ is add.func  # type: ignore[attr-defined]


def test_a_resume_that_calls_its_tasks_in_another_order_is_refused(saver: Checkpointer) -> None:
    order = {"first": "a"}

    @task
    def a() -> str:
        return "a"

    @task
    def b() -> str:
        return "b"

    @entrypoint(checkpointer=saver)
    def flow(_: Any) -> list[str]:
        first = (a if order["first"] == "a" else b)().result()
        return [first, interrupt("go on?")]

    assert "__interrupt__" in flow.invoke({}, thread_id="t")
    order["first"] = "b"
    with pytest.raises(TaskReplayError, match=r"called task 'b' as its task call #0, where .* called 'a'"):
        flow.invoke(Command(resume="yes"), thread_id="t")
    order["first"] = "a"  # fixed: the thread continues, its answer kept
    assert flow.invoke(None, thread_id="t") == ["a", "yes"]


def test_a_task_retries_inside_its_call_and_a_retried_entrypoint_replays_finished_tasks() -> None:
    attempts: list[str] = []
    fast = RetryPolicy(max_attempts=3, initial_interval=0, jitter=0)

    @task(retry=fast)
    def flaky() -> str:
        attempts.append("flaky")
        if attempts.count("flaky") < 3:
            raise ConnectionError("try again")
        return "ok"

    @task
    def once() -> str:
        attempts.append("once")
        return "done"

    runs = {"n": 0}

    @entrypoint(checkpointer=MemoryCheckpointer(), retry=fast)
    def flow(_: Any) -> list[str]:
        out = [once().result(), flaky().result()]
        runs["n"] += 1
        if runs["n"] == 1:
            raise ValueError("the whole function fails once")
        return out

    assert flow.invoke({}, thread_id="t") == ["done", "ok"]
    assert attempts == ["once", "flaky", "flaky", "flaky"], "the retry replayed both recorded tasks"


def test_tasks_nested_in_concurrent_tasks_are_numbered_within_each(saver: Checkpointer) -> None:
    ran: list[str] = []

    @task
    def leaf(tag: str) -> str:
        ran.append(tag)
        return tag

    @task
    def branch(name: str) -> list[str]:
        return [leaf(f"{name}{i}").result() for i in range(3)]

    @entrypoint(checkpointer=saver)
    def flow(_: Any) -> Any:
        futures = [branch("x"), branch("y")]
        got = [f.result() for f in futures]
        return [got, interrupt("ok?")]

    assert "__interrupt__" in flow.invoke({}, thread_id="t")
    assert flow.invoke(Command(resume="ok"), thread_id="t") == [[["x0", "x1", "x2"], ["y0", "y1", "y2"]], "ok"]
    assert sorted(ran) == ["x0", "x1", "x2", "y0", "y1", "y2"]


def test_a_call_left_running_when_the_function_returns_is_finished_and_recorded_first(saver: Checkpointer) -> None:
    done: list[str] = []
    gate = threading.Event()

    @task
    def background() -> str:
        gate.wait(20)
        done.append("background")
        return "b"

    @entrypoint(checkpointer=saver)
    def flow(_: Any) -> str:
        background()  # never waited for
        gate.set()
        return "returned"

    assert flow.invoke({}, thread_id="t") == "returned"
    assert done == ["background"]


def test_tasks_called_from_a_graph_node_are_recorded_and_replayed(saver: Checkpointer) -> None:
    ran: list[str] = []

    @task
    def lookup(key: str) -> str:
        ran.append(key)
        return key.upper()

    def node(state: Any) -> dict[str, Any]:
        found = [f.result() for f in [lookup("a"), lookup("b")]]
        answer = interrupt("which?")
        return {"log": [*found, answer]}

    app = (
        Graph(StateSchema.builder().add("log", AppendList()).build())
        .add_node("node", node)
        .add_edge(START, "node")
        .compile(saver)
    )
    assert "__interrupt__" in app.invoke({}, thread_id="t")
    assert app.invoke(Command(resume="a"), thread_id="t")["log"] == ["A", "B", "a"]
    assert sorted(ran) == ["a", "b"]


def test_the_function_gets_previous_ctx_store_and_writer_by_name(saver: Checkpointer) -> None:
    memory = Store()
    effects: list[str] = []

    @entrypoint(checkpointer=saver, store=memory, context_schema=dict)
    def flow(x: int, *, previous: Any, ctx: NodeContext, store: Any, writer: Any) -> dict[str, Any]:
        writer({"progress": x})
        store.put(("users",), "u1", {"seen": x})
        receipt = ctx.once("charge", lambda: effects.append("charged") or "r-1")  # type: ignore[func-returns-value]
        return {"x": x, "previous": previous, "model": ctx.context["model"], "receipt": receipt}

    items = list(flow.stream(1, thread_id="t", mode=["custom", "updates"], context={"model": "m"}))
    assert items[0] == ("custom", {"progress": 1})
    assert items[-1][1]["flow"]["model"] == "m"
    out = flow.invoke(2, thread_id="t", context={"model": "m"})
    assert out["previous"]["x"] == 1 and out["receipt"] == "r-1"
    item = memory.get(("users",), "u1")
    assert item is not None and item.value == {"seen": 2}


def test_an_entrypoint_needs_an_input_parameter_and_only_parameters_plait_injects() -> None:
    with pytest.raises(EntrypointSignatureError, match="no positional parameter"):
        entrypoint()(lambda: None)

    def wants_config(x: Any, config: Any) -> Any:
        return x

    with pytest.raises(EntrypointSignatureError, match="'config'"):
        entrypoint()(wants_config)


def test_tasks_from_nodes_of_every_kind_and_an_async_task_a_loop_node_cannot_wait_for() -> None:
    @task
    def inc(x: int) -> int:
        return x + 1

    @task
    async def ainc(x: int) -> int:
        return x + 1

    def threaded(state: Any, ctx: NodeContext) -> dict[str, Any]:  # a ctx: runs in a worker thread
        return {"log": [inc(1).result(), ainc(2).result()]}

    async def coroutine(state: Any) -> dict[str, Any]:
        return {"log": [await inc(3), await ainc(4)]}

    def on_loop(state: Any) -> dict[str, Any]:  # runs inline, on the loop
        return {"log": [ainc(5).result()]}

    def graph(*nodes: Callable[..., Any]) -> Any:
        g = Graph(StateSchema.builder().add("log", AppendList()).build())
        previous = START
        for i, fn in enumerate(nodes):
            g.add_node(f"n{i}", fn).add_edge(previous, f"n{i}")
            previous = f"n{i}"
        return g.compile(MemoryCheckpointer())

    assert graph(threaded, coroutine).invoke({}, thread_id="t")["log"] == [2, 3, 4, 5]
    with pytest.raises(NodeError) as caught:
        graph(on_loop).invoke({}, thread_id="t")
    assert isinstance(caught.value.__cause__, TaskWaitOnLoopError)
    assert "give it a ctx parameter" in str(caught.value.__cause__)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_recorded_tasks_survive_a_failure_in_every_durability(saver: Checkpointer, durability: str) -> None:
    ran: list[int] = []
    fail = {"now": True}

    @task
    def step(i: int) -> int:
        ran.append(i)
        return i

    @entrypoint(checkpointer=saver)
    def flow(n: int) -> int:
        total = sum(step(i).result() for i in range(n))
        if fail["now"]:
            raise RuntimeError("down")
        return total

    with pytest.raises(NodeError):
        flow.invoke(3, thread_id="t", durability=durability)
    fail["now"] = False
    assert flow.invoke(None, thread_id="t", durability=durability) == 3
    assert ran == [0, 1, 2]


def test_sync_tasks_waiting_for_sync_tasks_they_called_never_take_every_thread(saver: Checkpointer) -> None:
    """A pool of two threads: the function holds one, and each of the ten tasks waits for a
    task it called. Were the inner calls left to the pool, the outer ones would hold its
    threads while their calls wait for one, forever; the waiting thread runs its call."""
    from concurrent.futures import ThreadPoolExecutor

    @task
    def inner(i: int) -> int:
        return i

    @task
    def outer(i: int) -> int:
        return inner(i).result() * 2

    with ThreadPoolExecutor(2) as pool:

        @entrypoint(checkpointer=saver, executor=pool)
        def flow(n: int) -> int:
            return sum(f.result() for f in [outer(i) for i in range(n)])

        assert flow.invoke(10, thread_id="t") == 90
