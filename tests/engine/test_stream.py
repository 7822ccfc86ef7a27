"""stream / astream: the events, updates, values and custom modes, and several at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait import (
    START,
    AppendList,
    CheckpointSaved,
    Command,
    CustomEvent,
    Graph,
    Interrupted,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    NodeFailed,
    NodeFinished,
    NodeStarted,
    RetryPolicy,
    RunFinished,
    StateSchema,
    StateUpdated,
    event_json,
    interrupt,
)
from plait.checkpoint.model import CheckpointWrite, Fence, WritesBatch
from plait.engine.events import update_item

from ._intruder import try_to_take_lease


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww("answer").build()


def fan_graph() -> Graph:
    """START -> a -> (b, c): two super-steps, the second with two tasks."""

    def a(state: Any, ctx: NodeContext) -> Any:
        ctx.emit({"progress": "a half done"})
        ctx.emit({"progress": "a done"})
        return {"log": ["a"]}

    g = Graph(schema()).add_node("a", a)
    g.add_node("b", lambda s: {"log": ["b"]}).add_node("c", lambda s: {"log": ["c"], "answer": 42})
    return g.add_edge(START, "a").add_edge("a", "b").add_edge("a", "c")


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_events_come_in_a_sensible_order() -> None:
    app = fan_graph().compile(MemoryCheckpointer())
    events = list(app.stream({}, mode="events", thread_id="t"))
    assert isinstance(events[0], CheckpointSaved) and events[0].source == "input"
    assert isinstance(events[-1], RunFinished)
    assert (events[-1].status, events[-1].thread_id, events[-1].step) == ("done", "t", 2)

    def index(cls: type, **fields: Any) -> int:
        for i, e in enumerate(events):
            if isinstance(e, cls) and all(getattr(e, k) == v for k, v in fields.items()):
                return i
        raise AssertionError(f"no {cls.__name__} with {fields} in {kinds(events)}")

    for node, step in (("a", 0), ("b", 1), ("c", 1)):
        started = index(NodeStarted, node=node, step=step)
        finished = index(NodeFinished, node=node, step=step)
        updated = index(StateUpdated, node=node, super_step=step)
        saved = index(CheckpointSaved, step=step + 1)
        assert started < finished < updated < saved, node
    assert index(CheckpointSaved, step=1) < index(NodeStarted, node="b"), "sync durability: saved before step 2"
    assert index(NodeStarted, node="a") < index(CustomEvent) < index(NodeFinished, node="a")

    finished_c = events[index(NodeFinished, node="c")]
    assert finished_c.writes == {"log": [["c"]], "answer": [42]}
    saved_ids = [e.checkpoint_id for e in events if isinstance(e, CheckpointSaved)]
    assert saved_ids[::-1] == [h.checkpoint_id for h in app.get_state_history("t")]


def test_every_event_has_a_json_form_with_its_kind() -> None:
    app = fan_graph().compile(MemoryCheckpointer())
    for event in app.stream({}, mode="events", thread_id="t"):
        data = event_json(event)
        assert isinstance(data["kind"], str)
    assert event_json(RunFinished(thread_id="t", step=1, status="done")) == {
        "kind": "run_finished",
        "thread_id": "t",
        "step": 1,
        "status": "done",
    }


def test_retries_and_interrupts_show_as_events() -> None:
    calls = [0]

    def flaky(state: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise ConnectionError("blip")
        return {"answer": interrupt("sure?")}

    policy = RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=0)
    g = Graph(schema()).add_node("f", flaky, retry=policy).add_edge(START, "f")
    app = g.compile(MemoryCheckpointer())
    events = list(app.stream({}, mode="events", thread_id="t"))
    assert kinds(events) == ["CheckpointSaved", "NodeStarted", "NodeFailed", "Interrupted", "RunFinished"]
    failed = events[2]
    assert isinstance(failed, NodeFailed)
    assert (failed.node, failed.attempt, failed.will_retry) == ("f", 1, True)
    assert "blip" in failed.error
    paused = events[3]
    assert isinstance(paused, Interrupted)
    assert [i.value for i in paused.interrupts] == ["sure?"]
    assert events[-1].status == "interrupted"

    events = list(app.stream(Command(resume="yes"), mode="events", thread_id="t"))
    assert kinds(events) == ["NodeStarted", "NodeFinished", "StateUpdated", "CheckpointSaved", "RunFinished"]
    assert events[-1].status == "done"


def test_a_failure_that_is_not_retried_is_a_node_failed_event() -> None:
    def bad(state: Any) -> Any:
        raise ValueError("nope")

    app = Graph(schema()).add_node("bad", bad).add_edge(START, "bad").compile(MemoryCheckpointer())
    events: list[Any] = []

    async def collect() -> None:
        async for e in app.astream({}, mode="events", thread_id="t"):
            events.append(e)

    with pytest.raises(NodeError):
        asyncio.run(collect())
    failed = [e for e in events if isinstance(e, NodeFailed)]
    assert [(e.node, e.will_retry) for e in failed] == [("bad", False)]


def test_a_failed_run_ends_with_a_failed_run_finished_event() -> None:
    def bad(state: Any) -> Any:
        raise ValueError("nope")

    app = Graph(schema()).add_node("bad", bad).add_edge(START, "bad").compile(MemoryCheckpointer())
    events: list[Any] = []

    async def collect() -> None:
        async for e in app.astream({}, mode="events", thread_id="t"):
            events.append(e)

    with pytest.raises(NodeError):
        asyncio.run(collect())
    assert isinstance(events[-1], RunFinished)
    assert events[-1].status == "failed"


def test_updates_mode_yields_each_task_writes_by_node() -> None:
    updates = list(fan_graph().compile().stream({}, mode="updates"))
    assert updates[0] == {"a": {"log": ["a"]}}
    assert sorted(updates[1:], key=lambda u: next(iter(u))) == [
        {"b": {"log": ["b"]}},
        {"c": {"log": ["c"], "answer": 42}},
    ]


@pytest.mark.parametrize(
    "returned",
    [
        [("log", ["a"]), ("answer", 1), ("log", ["b"])],
        Command(update=[("log", ["a"]), ("answer", 1), ("log", ["b"])]),
    ],
    ids=["pairs", "command"],
)
def test_updates_show_every_write_of_a_node_that_writes_a_key_twice(returned: Any) -> None:
    g = Graph(schema()).add_node("n", lambda s: returned).add_edge(START, "n")
    app = g.compile()
    assert list(app.stream({}, mode="updates")) == [{"n": [{"log": ["a"]}, {"answer": 1}, {"log": ["b"]}]}]
    assert app.invoke({})["log"] == ["a", "b"], "the state got both writes, as the item says"


write_lists = st.lists(st.tuples(st.sampled_from(["log", "answer"]), st.integers(0, 9)), min_size=1, max_size=6)


@settings(max_examples=50, deadline=None, database=None)
@given(write_lists)
def test_an_updates_item_holds_exactly_the_writes_of_the_node_in_order(writes: list[tuple[str, int]]) -> None:
    item = update_item(writes)
    if len({k for k, _ in writes}) == len(writes):
        assert item == dict(writes), "each key written once: one dict, as LangGraph shows it"
    else:
        assert isinstance(item, list) and all(len(one) == 1 for one in item)
    pairs = list(item.items()) if isinstance(item, dict) else [kv for one in item for kv in one.items()]
    assert pairs == writes


def test_values_mode_yields_the_state_after_the_input_and_after_each_step() -> None:
    values = list(fan_graph().compile().stream({"answer": 1}, mode="values"))
    assert values == [
        {"log": [], "answer": 1},
        {"log": ["a"], "answer": 1},
        {"log": ["a", "b", "c"], "answer": 42},
    ]


def test_custom_mode_yields_what_nodes_emit() -> None:
    assert list(fan_graph().compile().stream({}, mode="custom")) == [
        {"progress": "a half done"},
        {"progress": "a done"},
    ]


def test_a_list_of_modes_yields_mode_item_pairs() -> None:
    items = list(fan_graph().compile().stream({}, mode=["values", "custom"]))
    assert items == [
        ("values", {"log": []}),
        ("custom", {"progress": "a half done"}),
        ("custom", {"progress": "a done"}),
        ("values", {"log": ["a"]}),
        ("values", {"log": ["a", "b", "c"], "answer": 42}),
    ]


def test_an_unknown_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        list(fan_graph().compile().stream({}, mode="nope"))  # type: ignore[arg-type]  # a wrong mode on purpose


def test_stream_and_astream_yield_the_same_items() -> None:
    app = fan_graph().compile(MemoryCheckpointer())

    async def collect() -> list[Any]:
        return [x async for x in app.astream({}, mode=["updates", "values", "custom"], thread_id="a")]

    sync_items = list(app.stream({}, mode=["updates", "values", "custom"], thread_id="s"))
    assert _updates_sorted(sync_items) == _updates_sorted(asyncio.run(collect()))


def _updates_sorted(items: list[Any]) -> list[Any]:
    """A step's updates come as its tasks finish (b and c run at once, in worker threads, in
    either order): each run of consecutive updates put in one fixed order."""
    out: list[Any] = []
    run: list[Any] = []
    for item in items:
        if item[0] == "updates":
            run.append(item)
            continue
        out += sorted(run, key=repr) + [item]
        run = []
    return out + sorted(run, key=repr)


def test_leaving_astream_early_releases_the_thread() -> None:
    async def slow(state: Any) -> Any:
        await asyncio.sleep(0.05)
        return {"log": ["slow"]}

    g = Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_node("slow", slow)
    app = g.add_edge(START, "a").add_edge("a", "slow").compile(MemoryCheckpointer())

    async def main() -> dict[str, Any]:
        stream = cast(AsyncGenerator[Any, None], app.astream({}, mode="values", thread_id="t"))
        async for _ in stream:
            break
        await stream.aclose()
        return await app.ainvoke(None, thread_id="t")

    assert asyncio.run(main())["log"] == ["a", "slow"]


def test_a_sync_node_custom_event_reaches_the_consumer_while_the_node_runs() -> None:
    consumer_waiting, received = threading.Event(), threading.Event()

    def node(state: Any, ctx: NodeContext) -> Any:
        consumer_waiting.wait(1)
        time.sleep(0.05)  # let the consumer block on the next item
        ctx.emit("progress")
        return {"log": [f"seen={received.wait(1)}"]}  # the consumer acknowledges while we wait

    app = Graph(schema()).add_node("a", node).add_edge(START, "a").compile()

    async def main() -> dict[str, Any]:
        last: dict[str, Any] = {}
        async for mode, item in app.astream({}, mode=["custom", "values"]):
            if mode == "custom":
                received.set()
            else:
                consumer_waiting.set()
                last = item
        return last

    assert asyncio.run(main())["log"] == ["seen=True"]


class _FailingStore(MemoryCheckpointer):
    """Refuses to commit the checkpoint of step 1 (a full disk, a lost connection)."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        if any(c.checkpoint.step == 1 for c in checkpoints):
            raise OSError("disk full")
        await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_checkpoint_saved_events_name_only_stored_checkpoints(durability: Any) -> None:
    g = Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_node("b", lambda s: {"log": ["b"]})
    app = g.add_edge(START, "a").add_edge("a", "b").compile(_FailingStore())
    events: list[Any] = []

    async def collect() -> None:
        async for e in app.astream({}, mode="events", thread_id="t", durability=durability):
            events.append(e)

    with pytest.raises(OSError, match="disk full"):
        asyncio.run(collect())
    announced = [e for e in events if isinstance(e, CheckpointSaved)]
    if durability == "sync":
        assert announced, "in sync durability the input checkpoint is stored before the failing step"
    for event in announced:
        assert app.get_state("t", event.checkpoint_id).step == event.step  # CheckpointNotFoundError if not stored
    assert all(e.step != 1 for e in announced), "the refused checkpoint is not announced"


def test_a_failing_sync_stream_yields_what_happened_before_the_failure() -> None:
    def bad(state: Any) -> Any:
        raise ValueError("nope")

    g = Graph(schema()).add_node("ok", lambda s: {"log": ["ok"]}).add_node("bad", bad)
    app = g.add_edge(START, "ok").add_edge("ok", "bad").compile()
    items: list[Any] = []
    with pytest.raises(NodeError):
        for item in app.stream({}, mode="updates"):
            items.append(item)
    assert items == [{"ok": {"log": ["ok"]}}]


def test_leaving_a_sync_stream_early_releases_the_thread() -> None:
    g = Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_node("b", lambda s: {"log": ["b"]})
    app = g.add_edge(START, "a").add_edge("a", "b").compile(MemoryCheckpointer())
    stream = cast(Generator[Any, None, None], app.stream({}, mode="values", thread_id="t"))
    assert next(stream) == {"log": []}
    stream.close()
    assert app.invoke(None, thread_id="t")["log"] == ["a", "b"]


def test_a_slow_sync_stream_consumer_does_not_lose_the_thread_lease() -> None:
    """The run goes on (and keeps its lease) while the consumer handles an item."""
    saver = MemoryCheckpointer()
    saver.lease_ttl = 0.15

    def b(state: Any) -> Any:
        time.sleep(0.8)  # still running while the consumer dawdles
        return {"log": ["b"]}

    g = Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_node("b", b)
    app = g.add_edge(START, "a").add_edge("a", "b").compile(saver)
    seen: list[str] = []
    items = list[Any]()
    for i, item in enumerate(app.stream({}, mode="values", thread_id="t")):
        items.append(item)
        if i == 0:
            time.sleep(0.4)  # a consumer slower than the lease
            seen.append(try_to_take_lease(saver, "t"))
    assert seen == ["busy"]
    assert items[-1]["log"] == ["a", "b"]
