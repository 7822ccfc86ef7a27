"""The super-step loop: node signatures and return shapes, merge order, write conflicts,
read-only state, Send, failures and resume, retries, timeouts and the recursion limit."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    AppendMessages,
    Checkpointer,
    Command,
    ConcurrentWriteError,
    Graph,
    LeaseLostError,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    NodeTimeoutError,
    NotSerializableError,
    ReadOnlyStateError,
    RecursionLimitError,
    RetryPolicy,
    Send,
    StateSchema,
    Sum,
    ThreadBusyError,
    UnknownChannelError,
    interrupt,
    message_id,
    thaw,
)
from plait._codec import freeze
from plait.checkpoint.model import CheckpointWrite, Fence, PendingWrite, WritesBatch
from plait.testing import ManualClock

from ._intruder import try_to_take_lease


def schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add("log", AppendList())
        .add("items", AppendList())
        .add("total", Sum())
        .add_lww("phase")
        .add_lww("answer")
        .build()
    )


def one_node(fn: Any, **kwargs: Any) -> Graph:
    return Graph(schema()).add_node("a", fn, **kwargs).add_edge(START, "a").add_edge("a", END)


# -- node signatures ---------------------------------------------------------------------


def test_sync_and_async_nodes_with_and_without_context() -> None:
    def sync_plain(state: Any) -> Any:
        return {"log": ["sync_plain"]}

    def sync_ctx(state: Any, ctx: NodeContext) -> Any:
        return {"log": [f"sync_ctx:{ctx.node}"]}

    async def async_plain(state: Any) -> Any:
        await asyncio.sleep(0)
        return {"log": ["async_plain"]}

    async def async_ctx(state: Any, ctx: NodeContext) -> Any:
        await asyncio.sleep(0)
        return {"log": [f"async_ctx:{ctx.node}"]}

    g = Graph(schema())
    names = ["sync_plain", "sync_ctx", "async_plain", "async_ctx"]
    fns: list[Callable[..., Any]] = [sync_plain, sync_ctx, async_plain, async_ctx]
    for name, fn in zip(names, fns, strict=True):
        g.add_node(name, fn)
    g.add_edge(START, "sync_plain")
    for a, b in zip(names, names[1:], strict=False):
        g.add_edge(a, b)
    assert g.compile().invoke({})["log"] == ["sync_plain", "sync_ctx:sync_ctx", "async_plain", "async_ctx:async_ctx"]


def test_the_context_says_where_the_node_runs() -> None:
    seen: list[dict[str, Any]] = []

    def a(state: Any, ctx: NodeContext) -> Any:
        seen.append(
            {
                "thread_id": ctx.thread_id,
                "step": ctx.step,
                "node": ctx.node,
                "task_id": ctx.task_id,
                "checkpoint_id": ctx.checkpoint_id,
            }
        )
        return {"log": ["a"]}

    app = one_node(a).compile(MemoryCheckpointer())
    app.invoke({}, thread_id="t1")
    [first] = app.get_state_history("t1")[-1:]  # the input checkpoint the step started from
    assert seen == [
        {
            "thread_id": "t1",
            "step": first.step,
            "node": "a",
            "task_id": first.tasks[0].id,
            "checkpoint_id": first.checkpoint_id,
        }
    ]


def test_the_idempotency_key_is_stable_when_a_failed_task_runs_again() -> None:
    keys: list[tuple[str, str]] = []
    fail = [True]

    def a(state: Any, ctx: NodeContext) -> Any:
        keys.append((ctx.task_id, ctx.idempotency_key))
        if fail[0]:
            fail[0] = False
            raise RuntimeError("transient")
        return {"log": ["a"]}

    app = one_node(a).compile(MemoryCheckpointer())
    with pytest.raises(NodeError):
        app.invoke({}, thread_id="t")
    app.invoke(None, thread_id="t")
    assert len(keys) == 2
    assert keys[0] == keys[1]
    other: list[str] = []
    one_node(lambda s, ctx: other.append(ctx.idempotency_key)).compile(MemoryCheckpointer()).invoke({}, thread_id="u")
    assert other[0] != keys[0][1], "another thread gets another key"


# -- return values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        ({"log": ["m"], "phase": "p"}, {"log": ["m"], "phase": "p"}),
        ([("log", ["l1"]), ("log", ["l2"]), ("phase", "q")], {"log": ["l1", "l2"], "phase": "q"}),
        (Command(update={"phase": "c"}), {"log": [], "phase": "c"}),
        (None, {"log": []}),
    ],
    ids=["mapping", "pairs", "command", "none"],
)
def test_a_node_may_return_a_mapping_pairs_a_command_or_none(returned: Any, expected: dict[str, Any]) -> None:
    out = one_node(lambda s: returned).compile().invoke({})
    assert {k: v for k, v in out.items() if k in ("log", "phase")} == expected


def test_a_plain_value_is_written_under_the_output_key() -> None:
    out = one_node(lambda s: "forty-two", output_key="answer").compile().invoke({})
    assert out["answer"] == "forty-two"


def test_command_goto_routes_instead_of_the_edges() -> None:
    g = Graph(schema())
    g.add_node("a", lambda s: Command(update={"log": ["a"]}, goto="c"), destinations=["b", "c"])
    g.add_node("b", lambda s: {"log": ["b"]}).add_node("c", lambda s: {"log": ["c"]})
    g.add_edge(START, "a")
    assert g.compile().invoke({})["log"] == ["a", "c"]


@pytest.mark.parametrize(("goto", "expected"), [("c", ["a", "b", "c"]), (END, ["a", "b"])], ids=["node", "END"])
def test_command_goto_adds_to_the_static_edges(goto: str, expected: list[str]) -> None:
    """As a conditional edge would (LangGraph users expect this): goto routes on top of the
    node's static edges, which still fire; static targets come first in planned order."""
    g = Graph(schema())
    g.add_node("a", lambda s: Command(update={"log": ["a"]}, goto=goto), destinations=["c"])
    g.add_node("b", lambda s: {"log": ["b"]}).add_node("c", lambda s: {"log": ["c"]})
    g.add_edge(START, "a").add_edge("a", "b")
    assert g.compile().invoke({})["log"] == expected


def test_a_bad_return_type_is_a_node_error_caused_by_type_error() -> None:
    with pytest.raises(NodeError) as info:
        one_node(lambda s: 42).compile().invoke({})
    assert info.value.node == "a"
    assert isinstance(info.value.__cause__, TypeError)
    assert "output_key" in str(info.value.__cause__)


def test_writing_an_unknown_channel_names_the_node() -> None:
    with pytest.raises(UnknownChannelError) as info:
        one_node(lambda s: {"nope": 1}).compile().invoke({})
    assert (info.value.channel, info.value.node) == ("nope", "a")


def test_writing_a_value_that_is_not_json_names_channel_and_node() -> None:
    with pytest.raises(NotSerializableError) as info:
        one_node(lambda s: {"phase": {"when": object()}}).compile().invoke({})
    assert (info.value.channel, info.value.node) == ("phase", "a")
    assert "phase.when" in str(info.value)


# -- sync facade -----------------------------------------------------------------------------


def test_the_sync_api_gives_what_the_async_api_gives() -> None:
    async def a(state: Any) -> Any:
        return {"log": ["a"], "total": 1}

    def b(state: Any) -> Any:
        return {"log": ["b"], "total": len(state["log"])}

    g = Graph(schema()).add_node("a", a).add_node("b", b).add_edge(START, "a").add_edge("a", "b")
    app = g.compile(MemoryCheckpointer())
    sync_out = app.invoke({"phase": "x"}, thread_id="s")
    async_out = asyncio.run(app.ainvoke({"phase": "x"}, thread_id="a"))
    assert sync_out == async_out == {"log": ["a", "b"], "items": [], "total": 2, "phase": "x"}
    assert [h.values for h in app.get_state_history("s")] == [h.values for h in app.get_state_history("a")]


# -- merge order and conflicts ----------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4, None], ids=["seed1", "seed2", "seed3", "seed4", "reversed"])
def test_parallel_writes_merge_in_planned_order_never_completion_order(seed: int | None) -> None:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(6)]
    if seed is None:  # the first planned finishes last
        delays = {n: (len(names) - i) * 0.005 for i, n in enumerate(names)}
    else:
        delays = {n: rng.random() * 0.02 for n in names}
    finished: list[str] = []

    def make(name: str) -> Any:
        async def node(state: Any) -> Any:
            await asyncio.sleep(delays[name])
            finished.append(name)
            return {"log": [name]}

        return node

    g = Graph(schema())
    for n in names:
        g.add_node(n, make(n)).add_edge(START, n)
    out = g.compile(MemoryCheckpointer()).invoke({}, thread_id="t")
    assert out["log"] == names
    assert sorted(finished) == sorted(names)


def test_two_tasks_writing_one_last_write_wins_channel_is_a_concurrent_write_error() -> None:
    g = Graph(schema())
    g.add_node("left", lambda s: {"phase": "L", "log": ["left"]})
    g.add_node("right", lambda s: {"phase": "R", "log": ["right"]})
    g.add_edge(START, "left").add_edge(START, "right")
    app = g.compile(MemoryCheckpointer())
    with pytest.raises(ConcurrentWriteError) as info:
        app.invoke({"phase": "start"}, thread_id="t")
    assert info.value.channel == "phase"
    assert set(info.value.nodes) == {"left", "right"}
    assert "'left'" in str(info.value) and "'right'" in str(info.value)
    state = app.get_state("t")
    assert state.values["phase"] == "start", "nothing of the conflicting step was merged"
    assert set(state.next) == {"left", "right"}


# -- read-only state ----------------------------------------------------------------------------


def test_a_node_cannot_mutate_its_input_state() -> None:
    caught: list[BaseException] = []

    def a(state: Any) -> Any:
        try:
            state["items"].append("sneaky")
        except ReadOnlyStateError as exc:
            caught.append(exc)
        return {"log": ["a"]}

    app = one_node(a).compile(MemoryCheckpointer())
    out = app.invoke({"items": ["x"]}, thread_id="t")
    assert len(caught) == 1
    assert out["items"] == ["x"]
    assert app.get_state("t").values["items"] == ["x"]


def test_an_uncaught_mutation_fails_the_run_and_stores_nothing() -> None:
    def a(state: Any) -> Any:
        state["items"].append("sneaky")
        return {"log": ["a"]}

    app = one_node(a).compile(MemoryCheckpointer())
    with pytest.raises((ReadOnlyStateError, NodeError)) as info:
        app.invoke({"items": ["x"]}, thread_id="t")
    assert isinstance(info.value, ReadOnlyStateError) or isinstance(info.value.__cause__, ReadOnlyStateError)
    assert app.get_state("t").values["items"] == ["x"]


def test_a_list_a_node_wrote_and_mutates_afterwards_does_not_change_stored_state() -> None:
    kept: list[list[str]] = []

    def a(state: Any) -> Any:
        mine = ["a"]
        kept.append(mine)
        return {"items": mine}

    def b(state: Any) -> Any:
        kept[0].append("mutated later")
        return {"log": ["b"]}

    g = Graph(schema()).add_node("a", a).add_node("b", b).add_edge(START, "a").add_edge("a", "b")
    app = g.compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    assert out["items"] == ["a"]
    assert [h.values["items"] for h in app.get_state_history("t")] == [["a"], ["a"], []]


# -- Send -------------------------------------------------------------------------------------


def test_map_reduce_with_a_thousand_sends() -> None:
    args: list[Any] = []
    seen_by_reduce: list[list[int]] = []

    async def work(arg: Any) -> Any:
        args.append(arg)
        return {"items": [arg["i"] * 2]}

    def reduce(state: Any) -> Any:
        seen_by_reduce.append(list(state["items"]))
        return {"total": sum(state["items"])}

    g = Graph(schema())
    g.add_node("split", lambda s: {"log": ["split"]}).add_node("work", work).add_node("reduce", reduce)
    g.add_edge(START, "split")
    g.add_conditional_edges("split", lambda s: [Send("work", {"i": i}) for i in range(1000)])
    g.add_edge("work", "reduce")
    out = g.compile(MemoryCheckpointer()).invoke({}, thread_id="t")
    assert sorted(a["i"] for a in args) == list(range(1000))
    assert len(seen_by_reduce) == 1, "the reduce node runs once, after all the sends"
    assert seen_by_reduce[0] == [i * 2 for i in range(1000)], "results merge in Send order"
    assert out["total"] == sum(i * 2 for i in range(1000))


def test_a_send_whose_arg_is_not_json_names_the_target_the_path_and_the_router_s_node() -> None:
    g = Graph(schema())
    g.add_node("split", lambda s: {"log": ["split"]}).add_node("work", lambda a: None)
    g.add_edge(START, "split")
    g.add_conditional_edges("split", lambda s: [Send("work", {"i": 1}), Send("work", {"i": 2, "at": {object()}})])
    with pytest.raises(NotSerializableError) as info:
        g.compile().invoke({})
    assert (info.value.channel, info.value.node) == ("Send('work').arg", "split")
    assert "Send('work').arg.at: set" in str(info.value)


def test_a_router_may_send_the_node_s_whole_state(make_saver: Callable[..., Checkpointer]) -> None:
    """LangGraph's map-reduce idiom, ``Send("worker", state)``: the worker gets the state as
    it was when the router ran, stored with the planned task on every backend."""
    got: list[Any] = []

    def worker(arg: Any) -> Any:
        got.append(thaw(arg))
        return {"items": [arg["phase"]]}

    g = Graph(schema()).add_node("split", lambda s: {"phase": "split", "log": ["split"]}).add_node("worker", worker)
    g.add_edge(START, "split").add_conditional_edges("split", lambda state: [Send("worker", state)] * 2)
    app = g.compile(make_saver(), interrupt_before=["worker"])
    app.invoke({"total": 1}, thread_id="t")  # paused with the two Sends stored
    out = app.invoke(None, thread_id="t")
    seen = {"log": ["split"], "items": [], "total": 1, "phase": "split"}
    assert got == [seen, seen], "the worker read the stored state back"
    assert out["items"] == ["split", "split"]


def test_a_node_may_send_its_state_by_command_and_write_it_as_a_value(make_saver: Callable[..., Checkpointer]) -> None:
    def split(state: Any) -> Any:
        return Command(update={"answer": {"snapshot": state}}, goto=[Send("worker", state)])

    def worker(arg: Any) -> Any:
        return {"items": [arg["total"]]}

    g = Graph(schema()).add_node("split", split, destinations=["worker"]).add_node("worker", worker)
    app = g.add_edge(START, "split").compile(make_saver())
    out = app.invoke({"total": 7}, thread_id="t")
    assert out["items"] == [7]
    snapshot = app.get_state("t").values["answer"]["snapshot"]
    assert snapshot == {"log": [], "items": [], "total": 7}, "the state as split saw it, not as it is now"


def test_async_nodes_of_one_step_can_time_themselves_out_with_asyncio_timeout() -> None:
    """Each node is a task of its own (eagerly started on Python 3.12 and later): a timeout
    inside one cancels that node's wait, never the run or a sibling."""

    async def waits(arg: Any) -> Any:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
        except TimeoutError:
            return {"items": [f"timed out {arg['i']}"]}
        return {"items": ["slept"]}

    async def quick(arg: Any) -> Any:
        return {"items": [f"quick {arg['i']}"]}

    g = Graph(schema()).add_node("split", lambda s: {"log": ["split"]})
    g.add_node("waits", waits).add_node("quick", quick).add_edge(START, "split")
    g.add_conditional_edges(
        "split", lambda s: [Send("waits", {"i": 0}), Send("quick", {"i": 1}), Send("waits", {"i": 2})]
    )
    out = asyncio.run(asyncio.wait_for(g.compile().ainvoke({}), timeout=10))
    assert out["items"] == ["timed out 0", "quick 1", "timed out 2"], "merged in Send order"


def test_command_goto_send_from_a_node() -> None:
    got: list[Any] = []

    def a(state: Any) -> Any:
        return Command(update={"log": ["a"]}, goto=[Send("w", {"n": 5}), Send("w", {"n": 6})])

    def w(arg: Any) -> Any:
        got.append(arg)
        return {"total": arg["n"]}

    g = Graph(schema()).add_node("a", a, destinations=["w"]).add_node("w", w).add_edge(START, "a")
    out = g.compile().invoke({})
    assert sorted(a["n"] for a in got) == [5, 6], "both ran (in worker threads: in either order)"
    assert out["total"] == 11


# -- failures ---------------------------------------------------------------------------------


def test_a_failing_node_lets_siblings_finish_and_a_resume_reruns_only_it() -> None:
    calls = {"ok1": 0, "ok2": 0, "bad": 0, "after": 0}
    broken = [True]

    def make(name: str) -> Any:
        async def node(state: Any) -> Any:
            calls[name] += 1
            if name == "bad":
                if broken[0]:
                    raise ValueError("boom")
                return {"log": ["bad"]}
            await asyncio.sleep(0.01)  # still running when bad fails
            return {"log": [name]}

        return node

    g = Graph(schema())
    for n in ("ok1", "bad", "ok2", "after"):
        g.add_node(n, make(n))
    g.add_edge(START, "ok1").add_edge(START, "bad").add_edge(START, "ok2")
    g.add_edge(["ok1", "bad", "ok2"], "after")
    app = g.compile(MemoryCheckpointer())
    with pytest.raises(NodeError) as info:
        app.invoke({}, thread_id="t")
    err = info.value
    assert (err.node, err.step, err.thread_id) == ("bad", 0, "t")
    assert isinstance(err.__cause__, ValueError)
    assert calls == {"ok1": 1, "ok2": 1, "bad": 1, "after": 0}
    state = app.get_state("t")
    assert state.values["log"] == [], "the failed step is not merged"
    assert state.next == ("bad",), "the finished siblings are not what runs next"
    assert {t.node: t.status for t in state.tasks} == {"ok1": "done", "bad": "failed", "ok2": "done"}

    broken[0] = False
    out = app.invoke(None, thread_id="t")
    assert calls == {"ok1": 1, "ok2": 1, "bad": 2, "after": 1}
    assert out["log"] == ["ok1", "bad", "ok2", "after"], "kept writes merge in planned order"


# -- message ids -------------------------------------------------------------------------------


def chat_loop(reply: Callable[[Any], Any] | None = None) -> Graph:
    """The first chat loop a LangGraph user writes: the bot answers the last message."""

    def bot(state: Any) -> Any:
        return {"messages": [{"role": "assistant", "content": f"you said {state['messages'][-1]['content']}"}]}

    g = Graph(StateSchema.builder().add("messages", AppendMessages()).add("log", AppendList()).build())
    return g.add_node("bot", reply or bot).add_edge(START, "bot").add_edge("bot", END)


def test_a_chat_loop_keeps_a_user_saying_yes_twice(make_saver: Callable[..., Checkpointer]) -> None:
    app = chat_loop().compile(make_saver())
    for _ in range(2):
        out = app.invoke({"messages": [{"role": "user", "content": "yes"}]}, thread_id="chat")
    said = [(m["role"], m["content"]) for m in out["messages"]]
    assert said == [("user", "yes"), ("assistant", "you said yes")] * 2, "the bot answered the user, not itself"
    assert len({m["id"] for m in out["messages"]}) == 4
    assert app.get_state("chat").values["messages"] == out["messages"]


def test_messages_are_named_by_the_task_that_wrote_them_and_their_position(
    make_saver: Callable[..., Checkpointer],
) -> None:
    ok = {"role": "assistant", "content": "ok"}
    app = chat_loop(lambda s: [("messages", [ok, ok]), ("log", ["bot"]), ("messages", ok)]).compile(make_saver())
    out = app.invoke(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}]}, thread_id="t"
    )
    started = app.get_state_history("t")[-1]  # the checkpoint the input created
    assert started.source == "input"
    task = started.tasks[0].id
    assert [m["id"] for m in out["messages"]] == [
        message_id(started.checkpoint_id, 0),
        message_id(started.checkpoint_id, 1),
        message_id(f"\x00t\x00{task}", 0),  # a task's messages: by namespace, thread and task
        message_id(f"\x00t\x00{task}", 1),
        message_id(f"\x00t\x00{task}", 2),
    ]


class _RefusesStepOneOnce:
    """Mixed into a real backend: its first commit of a step-1 checkpoint fails (a full disk,
    a dropped connection), after the step's tasks ran."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        if not getattr(self, "refused", False) and any(c.checkpoint.step == 1 for c in checkpoints):
            self.refused = True
            raise OSError("disk full")
        await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)  # type: ignore[misc]


def test_a_task_that_runs_again_names_its_messages_alike(make_saver: Callable[..., Checkpointer]) -> None:
    """The bot's step fails after the bot ran (its commit is refused), so the resume runs the
    same task again: its messages get the ids they got the first time."""
    calls = [0]

    def bot(state: Any) -> Any:
        calls[0] += 1
        return {"messages": [{"role": "assistant", "content": "ok"}, {"role": "assistant", "content": "ok"}]}

    app = chat_loop(bot).compile(make_saver(_RefusesStepOneOnce))
    first: list[Any] = []
    with pytest.raises(OSError, match="disk full"):
        for item in app.stream({"messages": []}, thread_id="t", mode="updates"):
            first.append(item)
    [update] = first
    out = app.invoke(None, thread_id="t")
    assert calls[0] == 2, "the bot ran again"
    assert [m["id"] for m in out["messages"]] == [m["id"] for m in update["bot"]["messages"]]
    assert len({m["id"] for m in out["messages"]}) == 2


def test_messages_of_a_task_kept_when_a_sibling_failed_keep_their_ids(make_saver: Callable[..., Checkpointer]) -> None:
    broken = [True]

    def fragile(state: Any) -> Any:
        if broken[0]:
            raise ValueError("boom")
        return {"log": ["fragile"]}

    g = Graph(StateSchema.builder().add("messages", AppendMessages()).add("log", AppendList()).build())
    g.add_node("bot", lambda s: {"messages": [{"role": "assistant", "content": "ok"}] * 2}).add_node("fragile", fragile)
    g.add_edge(START, "bot").add_edge(START, "fragile").add_edge("bot", END).add_edge("fragile", END)
    app = g.compile(make_saver())
    streamed: list[Any] = []
    with pytest.raises(NodeError):
        for item in app.stream({}, thread_id="t", mode="updates"):
            streamed.append(item)
    bot_task = next(t.id for t in app.get_state("t").tasks if t.node == "bot")
    broken[0] = False
    out = app.invoke(None, thread_id="t")
    ids = [message_id(f"\x00t\x00{bot_task}", 0), message_id(f"\x00t\x00{bot_task}", 1)]
    assert [m["id"] for m in out["messages"]] == ids
    assert [m["id"] for m in streamed[0]["bot"]["messages"]] == ids


def test_a_saved_result_whose_messages_have_no_ids_is_named_by_its_task(
    make_saver: Callable[..., Checkpointer],
) -> None:
    """A task result saved by a plait that left naming to the reducer (a thread that failed
    mid-step before an upgrade) resumes with its messages named by its task."""
    calls = [0]

    def bot(state: Any) -> Any:
        calls[0] += 1
        return {"messages": [{"role": "assistant", "content": "never"}]}

    g = Graph(StateSchema.builder().add("messages", AppendMessages()).add("log", AppendList()).build())
    g.add_node("bot", bot).add_node("other", lambda s: {"log": ["other"]})
    g.add_edge(START, "bot").add_edge(START, "other").add_edge("bot", END).add_edge("other", END)
    saver = make_saver()
    app = g.compile(saver, interrupt_before=["bot"])
    app.invoke({}, thread_id="t")
    head = app.get_state("t")
    bot_task = next(t.id for t in head.tasks if t.node == "bot")
    ok = {"role": "assistant", "content": "ok"}
    old = PendingWrite(task_id=bot_task, kind="result", value=freeze({"w": [["messages", [ok, ok]]], "r": []}, "w"))
    batch = WritesBatch(thread_id="t", namespace="", checkpoint_id=head.checkpoint_id, writes=(old,))
    asyncio.run(saver.acommit(writes=[batch]))
    out = app.invoke(None, thread_id="t")
    assert calls[0] == 0, "the saved result was used"
    assert out["messages"] == [{**ok, "id": message_id(bot_task, 0)}, {**ok, "id": message_id(bot_task, 1)}]


def test_a_command_update_names_its_messages_by_the_checkpoint_it_creates(
    make_saver: Callable[..., Checkpointer],
) -> None:
    def ask(state: Any) -> Any:
        return {"log": [interrupt("more?")]}

    app = chat_loop(ask).compile(make_saver())
    yes = {"role": "user", "content": "yes"}
    app.invoke({"messages": [yes]}, thread_id="t")
    out = app.invoke(Command(resume="go", update={"messages": [yes]}), thread_id="t")
    update = next(h for h in app.get_state_history("t") if h.source == "update")
    assert [m["content"] for m in out["messages"]] == ["yes", "yes"]
    assert out["messages"][1]["id"] == message_id(update.checkpoint_id, 0)


def test_a_cancelled_run_keeps_finished_tasks_and_a_resume_reruns_only_the_rest() -> None:
    calls = {"a": 0, "slow": 0, "fast": 0}
    hang = [True]

    async def main() -> dict[str, Any]:
        slow_started, fast_done = asyncio.Event(), asyncio.Event()

        def a(state: Any) -> Any:
            calls["a"] += 1
            return {"log": ["a"]}

        async def slow(state: Any) -> Any:
            calls["slow"] += 1
            slow_started.set()
            if hang[0]:
                await asyncio.Event().wait()  # until cancelled
            return {"log": ["slow"]}

        async def fast(state: Any) -> Any:
            calls["fast"] += 1
            fast_done.set()
            return {"log": ["fast"]}

        g = Graph(schema()).add_node("a", a).add_node("slow", slow).add_node("fast", fast)
        g.add_edge(START, "a").add_edge("a", "slow").add_edge("a", "fast")
        app = g.compile(MemoryCheckpointer())
        run = asyncio.create_task(app.ainvoke({}, thread_id="t"))
        await slow_started.wait()
        await fast_done.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        state = await app.aget_state("t")
        assert state.values["log"] == ["a"]
        assert state.next == ("slow",), "fast finished: its writes are saved"
        assert [t.status for t in state.tasks] == ["pending", "done"]
        hang[0] = False
        return await app.ainvoke(None, thread_id="t")

    out = asyncio.run(main())
    assert out["log"] == ["a", "slow", "fast"]
    assert calls == {"a": 1, "slow": 2, "fast": 1}


def test_retry_policy_retries_then_succeeds() -> None:
    calls = [0]

    def a(state: Any) -> Any:
        calls[0] += 1
        if calls[0] < 3:
            raise ConnectionError("flaky")
        return {"log": ["a"]}

    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0)
    assert one_node(a, retry=policy).compile().invoke({})["log"] == ["a"]
    assert calls[0] == 3


def test_retry_policy_exhausted_is_a_node_error_with_the_last_cause() -> None:
    calls = [0]

    def a(state: Any) -> Any:
        calls[0] += 1
        raise ConnectionError(f"attempt {calls[0]}")

    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0)
    with pytest.raises(NodeError) as info:
        one_node(a, retry=policy).compile().invoke({})
    assert calls[0] == 3
    assert str(info.value.__cause__) == "attempt 3"


@pytest.mark.parametrize(
    "retry_on",
    [ConnectionError, (ConnectionError, TimeoutError), lambda e: isinstance(e, ConnectionError)],
    ids=["type", "tuple", "predicate"],
)
def test_retry_on_filters_what_is_retried(retry_on: Any) -> None:
    calls = {"conn": 0, "value": 0}

    def flaky(state: Any) -> Any:
        calls["conn"] += 1
        if calls["conn"] == 1:
            raise ConnectionError("retried")
        return {"log": ["ok"]}

    def wrong(state: Any) -> Any:
        calls["value"] += 1
        raise ValueError("not retried")

    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0, retry_on=retry_on)
    assert one_node(flaky, retry=policy).compile().invoke({})["log"] == ["ok"]
    assert calls["conn"] == 2
    with pytest.raises(NodeError) as info:
        one_node(wrong, retry=policy).compile().invoke({})
    assert calls["value"] == 1
    assert isinstance(info.value.__cause__, ValueError)


def test_a_timeout_on_an_async_node_is_a_node_timeout_error() -> None:
    async def slow(state: Any) -> Any:
        await asyncio.sleep(5)
        return {"log": ["late"]}

    with pytest.raises(NodeTimeoutError) as info:
        one_node(slow, timeout=0.05).compile().invoke({})
    assert (info.value.node, info.value.timeout) == ("a", 0.05)


def test_a_timeout_on_a_sync_node_is_a_node_timeout_error() -> None:
    def slow(state: Any) -> Any:
        time.sleep(0.3)
        return {"log": ["late"]}

    with pytest.raises(NodeTimeoutError) as info:
        one_node(slow, timeout=0.05).compile().invoke({})
    assert info.value.node == "a"


def test_a_timed_out_node_is_retried_by_its_policy() -> None:
    calls = [0]

    async def a(state: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            await asyncio.sleep(5)
        return {"log": ["a"]}

    policy = RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=0, retry_on=TimeoutError)
    assert one_node(a, timeout=0.05, retry=policy).compile().invoke({})["log"] == ["a"]
    assert calls[0] == 2


@pytest.mark.parametrize(
    "retry_on",
    [
        NodeTimeoutError,
        TimeoutError,
        asyncio.TimeoutError,
        (ValueError, NodeTimeoutError),
        lambda e: isinstance(e, NodeTimeoutError) and e.node == "a",
    ],
    ids=["NodeTimeoutError", "TimeoutError", "asyncio.TimeoutError", "tuple", "predicate"],
)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_retry_policy_on_timeouts_retries_a_node_that_timed_out(kind: str, retry_on: Any) -> None:
    calls = [0]

    def sync_node(state: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(0.3)
        return {"log": [f"attempt {calls[0]}"]}

    async def async_node(state: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            await asyncio.sleep(5)
        return {"log": [f"attempt {calls[0]}"]}

    policy = RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=0, retry_on=retry_on)
    fn = sync_node if kind == "sync" else async_node
    assert one_node(fn, timeout=0.05, retry=policy).compile().invoke({})["log"] == ["attempt 2"]
    assert calls[0] == 2


def test_a_retry_policy_for_other_errors_does_not_retry_a_timeout() -> None:
    calls = [0]

    async def slow(state: Any) -> Any:
        calls[0] += 1
        await asyncio.sleep(5)

    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0, retry_on=ConnectionError)
    with pytest.raises(NodeTimeoutError) as info:
        one_node(slow, timeout=0.05, retry=policy).compile().invoke({})
    assert calls[0] == 1
    assert isinstance(info.value, TimeoutError), "a NodeTimeoutError is a TimeoutError too"


@pytest.mark.parametrize("timeout", [None, 5.0])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_timeout_error_raised_by_the_node_itself_is_not_a_node_timeout(kind: str, timeout: float | None) -> None:
    def sync_node(state: Any) -> Any:
        raise TimeoutError("the upstream socket timed out")

    async def async_node(state: Any) -> Any:
        raise TimeoutError("the upstream socket timed out")

    with pytest.raises(NodeError) as info:
        one_node(sync_node if kind == "sync" else async_node, timeout=timeout).compile().invoke({})
    assert not isinstance(info.value, NodeTimeoutError)
    assert "the upstream socket timed out" in str(info.value)


def test_a_plait_error_raised_inside_node_code_is_a_node_error_naming_that_node() -> None:
    inner = one_node(lambda s: (_ for _ in ()).throw(ValueError("inner boom"))).compile()

    def outer(state: Any) -> Any:
        inner.invoke({})
        return {"log": ["outer"]}

    g = Graph(schema()).add_node("outer", outer).add_edge(START, "outer")
    with pytest.raises(NodeError) as info:
        g.compile().invoke({})
    assert info.value.node == "outer"


def test_the_recursion_limit_stops_a_loop_and_says_how_to_raise_it() -> None:
    g = Graph(schema()).add_node("spin", lambda s: {"total": 1}).add_edge(START, "spin").add_edge("spin", "spin")
    app = g.compile(MemoryCheckpointer())
    with pytest.raises(RecursionLimitError) as info:
        app.invoke({}, thread_id="t", recursion_limit=5)
    assert info.value.limit == 5
    assert "recursion_limit" in str(info.value)
    assert app.get_state("t").values["total"] == 5
    assert app.get_state("t").next == ("spin",), "the thread can continue with a larger limit"


def test_the_recursion_limit_counts_super_steps_exactly() -> None:
    g = Graph(schema())
    for n in ("a", "b", "c"):
        g.add_node(n, lambda s: {"total": 1})
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c")
    assert g.compile().invoke({}, recursion_limit=3)["total"] == 3
    with pytest.raises(RecursionLimitError):
        g.compile().invoke({}, recursion_limit=2)


# -- one run per thread ------------------------------------------------------------------------


def test_a_second_concurrent_run_on_one_thread_is_thread_busy() -> None:
    async def main() -> list[Any]:
        started, release = asyncio.Event(), asyncio.Event()

        async def blocker(state: Any) -> Any:
            started.set()
            await asyncio.wait_for(release.wait(), 5)
            return {"log": ["first"]}

        app = one_node(blocker).compile(MemoryCheckpointer())

        async def second() -> Any:
            await started.wait()
            try:
                return await app.ainvoke({}, thread_id="t")
            finally:
                release.set()

        return list(await asyncio.gather(app.ainvoke({}, thread_id="t"), second(), return_exceptions=True))

    first, second = asyncio.run(main())
    assert first == {"log": ["first"], "items": [], "total": 0}
    assert isinstance(second, ThreadBusyError)
    assert second.thread_id == "t"


class _Renewed(MemoryCheckpointer):
    """Counts renewals; a node waits for them while blocking the loop, as a slow sync node
    (an LLM call, a big computation) does."""

    clock: ManualClock

    def __init__(self) -> None:
        self.clock = ManualClock()
        super().__init__(lease_ttl=0.15, clock=self.clock)
        self.count = 0
        self._cond = threading.Condition()

    def renew_lease(self, lease: Any, *, ttl: float | None = None) -> Any:
        renewed = super().renew_lease(lease, ttl=ttl)
        with self._cond:
            self.count += 1
            self._cond.notify_all()
        return renewed

    def outlive_the_first_lease(self) -> str:
        """Blocking: move the lease clock past the run's first lease life, in two steps each
        followed by a renewal, then see whether an intruder can take the thread."""
        for _ in range(2):
            with self._cond:
                seen = self.count
            self.clock.advance(self.lease_ttl * 0.9)
            with self._cond:
                assert self._cond.wait_for(lambda: self.count > seen, 30), "no renewal came"
        return try_to_take_lease(self, "t")


def test_a_slow_sync_node_with_context_keeps_the_lease_renewed() -> None:
    saver = _Renewed()

    def slow(state: Any, ctx: NodeContext) -> Any:
        return {"log": [saver.outlive_the_first_lease()]}

    assert one_node(slow).compile(saver).invoke({}, thread_id="t")["log"] == ["busy"]


def test_a_slow_lone_sync_node_keeps_the_lease_renewed() -> None:
    saver = _Renewed()

    def slow(state: Any) -> Any:  # run inline: it blocks the loop, the lease is renewed off it
        return {"log": [saver.outlive_the_first_lease()]}

    assert one_node(slow).compile(saver).invoke({}, thread_id="t")["log"] == ["busy"]


def test_a_slow_lone_sync_node_keeps_a_sqlite_lease_renewed(tmp_path: Any) -> None:
    """On a durable store too: the node blocks the loop, the lease is renewed off it."""
    from plait import SqliteCheckpointer

    clock = ManualClock()
    renewals = threading.Semaphore(0)

    class Counting(SqliteCheckpointer):
        async def arenew_lease(self, lease: Any, *, ttl: float | None = None) -> Any:
            renewed = await super().arenew_lease(lease, ttl=ttl)
            renewals.release()
            return renewed

    saver = Counting(str(tmp_path / "lease.db"), lease_ttl=0.15, clock=clock)
    seen: list[str] = []

    def slow(state: Any) -> Any:
        for _ in range(2):
            assert renewals.acquire(timeout=30), "no renewal came"
            clock.advance(0.135)
            assert renewals.acquire(timeout=30), "no renewal came"
        seen.append(try_to_take_lease(saver, "t"))
        return {"log": ["slow"]}

    try:
        one_node(slow).compile(saver).invoke({}, thread_id="t")
    finally:
        saver.close()
    assert seen == ["busy"]


def test_a_run_that_lost_its_lease_stops() -> None:
    clock = ManualClock()
    saver = MemoryCheckpointer(clock=clock)
    calls = {"b": 0}

    async def stall(state: Any) -> Any:
        # This run stalls past its lease; another owner takes the thread over.
        clock.advance(saver.lease_ttl + 1)
        assert try_to_take_lease(saver, "t") == "taken"
        return {"log": ["stall"]}

    def b(state: Any) -> Any:
        calls["b"] += 1
        return {"log": ["b"]}

    g = Graph(schema()).add_node("stall", stall).add_node("b", b).add_edge(START, "stall").add_edge("stall", "b")
    app = g.compile(saver)
    with pytest.raises(LeaseLostError) as info:
        app.invoke({}, thread_id="t")
    assert info.value.taken_by == "intruder"
    assert calls["b"] == 0, "no node runs for a thread whose lease another owner holds"
    assert [h.step for h in app.get_state_history("t")] == [0], "nothing is committed after the lease was lost"
