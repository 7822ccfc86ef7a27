"""CompiledGraph: durability modes, time travel, state editing, forks, thread diffs, and
refusing to resume a thread on an incompatible graph."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    AppendMessages,
    Checkpointer,
    CheckpointNotFoundError,
    Command,
    CompiledGraph,
    Graph,
    GraphChangedError,
    GraphError,
    LastWriteWins,
    MemoryCheckpointer,
    MissingNodeError,
    NoCheckpointerError,
    NodeError,
    SqliteCheckpointer,
    StateSchema,
    ThreadBusyError,
    ThreadState,
    interrupt,
    message_id,
)
from plait.checkpoint.model import CheckpointWrite, Fence, WritesBatch
from plait.inspect import diff_values


def schema(log_reducer: Any = None) -> StateSchema:
    return StateSchema.builder().add("log", log_reducer or AppendList()).add_lww("topic").build()


class Counted:
    """Nodes that log ``<name><call number>`` so re-runs are visible in the state."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def node(self, name: str) -> Any:
        def fn(state: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return {"log": [f"{name}{self.calls[name]}"]}

        return fn


def abc(counted: Counted | None = None, saver: MemoryCheckpointer | None = None) -> CompiledGraph:
    """START -> a -> b -> c -> END."""
    c = counted or Counted()
    g = Graph(schema())
    for n in ("a", "b", "c"):
        g.add_node(n, c.node(n))
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    return g.compile(saver or MemoryCheckpointer())


def at_step(app: CompiledGraph, thread: str, step: int) -> ThreadState:
    [state] = [h for h in app.get_state_history(thread) if h.step == step]
    return state


# -- invoking ---------------------------------------------------------------------------


def test_a_graph_with_a_checkpointer_needs_a_thread_id() -> None:
    with pytest.raises(GraphError, match="thread_id"):
        abc().invoke({})


def test_resuming_needs_a_checkpointer() -> None:
    g = Graph(schema()).add_node("a", lambda s: None).add_edge(START, "a")
    with pytest.raises(NoCheckpointerError):
        g.compile().invoke(None)
    with pytest.raises(NoCheckpointerError):
        g.compile().invoke(Command(resume=1))


def test_invoke_none_on_an_unknown_thread_is_checkpoint_not_found() -> None:
    with pytest.raises(CheckpointNotFoundError, match="'ghost'"):
        abc().invoke(None, thread_id="ghost")


# -- durability ----------------------------------------------------------------------------


def test_durability_modes_give_the_same_values_and_sync_async_the_same_history() -> None:
    saver = MemoryCheckpointer()
    results = {}
    for mode in ("sync", "async", "exit"):
        results[mode] = abc(saver=saver).invoke({"topic": "t"}, thread_id=mode, durability=mode)
    assert results["sync"] == results["async"] == results["exit"] == {"log": ["a1", "b1", "c1"], "topic": "t"}

    app = abc(saver=saver)
    shape = {m: [(h.step, h.source, h.next) for h in app.get_state_history(m)] for m in ("sync", "async", "exit")}
    expected = [(3, "loop", ()), (2, "loop", ("c",)), (1, "loop", ("b",)), (0, "input", ("a",))]
    assert shape["sync"] == shape["async"] == expected
    assert len(shape["exit"]) < len(shape["sync"])
    assert app.get_state("exit").values == results["exit"]
    assert [h.values for h in app.get_state_history("sync")] == [h.values for h in app.get_state_history("async")]


def test_sync_durability_stores_the_input_checkpoint_before_the_first_step_runs() -> None:
    seen: list[int] = []

    async def first(state: Any) -> Any:
        seen.append((await app.aget_state("t")).step)  # CheckpointNotFoundError if not stored yet
        return {"log": ["first"]}

    app = Graph(schema()).add_node("first", first).add_edge(START, "first").compile(MemoryCheckpointer())
    app.invoke({}, thread_id="t", durability="sync")
    assert seen == [0]


def test_sync_durability_stores_each_step_before_the_next_runs() -> None:
    seen: list[int] = []

    async def probe(state: Any) -> Any:
        seen.append((await app.aget_state("t")).step)
        return {"log": ["probe"]}

    g = Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_node("probe", probe)
    app = g.add_edge(START, "a").add_edge("a", "probe").compile(MemoryCheckpointer())
    app.invoke({}, thread_id="t", durability="sync")
    assert seen == [1]


class _RefusesStepOne(MemoryCheckpointer):
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


@pytest.mark.parametrize(
    "durability",
    ["sync", "async"],
)
def test_a_failed_commit_leaves_the_last_good_checkpoint_as_head(durability: Any) -> None:
    app = abc(saver=_RefusesStepOne())
    with pytest.raises(OSError, match="disk full"):
        app.invoke({}, thread_id="t", durability=durability)
    history = app.get_state_history("t")
    # In async durability the input checkpoint may share the refused group commit; either
    # way nothing after the refused step is stored and the lineage stays whole.
    assert [h.step for h in history] in ([0], []) if durability == "async" else [h.step for h in history] == [0]
    assert all(h.step == 0 for h in history)
    assert not history or history[-1].parent_id is None, "the history reaches its root"


def test_exit_durability_stores_the_checkpoint_of_an_interrupt() -> None:
    def ask(state: Any) -> Any:
        return {"topic": interrupt("which topic?")}

    g = Graph(schema()).add_node("pre", lambda s: {"log": ["pre"]}).add_node("ask", ask)
    app = g.add_edge(START, "pre").add_edge("pre", "ask").compile(MemoryCheckpointer())
    app.invoke({}, thread_id="t", durability="exit")
    assert app.get_state("t").next == ("ask",)
    assert [i.value for i in app.get_state("t").interrupts] == ["which topic?"]
    out = app.invoke(Command(resume="cats"), thread_id="t", durability="exit")
    assert out == {"log": ["pre"], "topic": "cats"}


def test_an_invalid_durability_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="durability"):
        abc().invoke({}, thread_id="t", durability="sometimes")  # type: ignore[call-overload]


# -- time travel ---------------------------------------------------------------------------


def test_invoking_from_an_old_checkpoint_makes_a_new_branch() -> None:
    app = abc()
    app.invoke({}, thread_id="T")
    old = app.get_state_history("T")
    after_a = at_step(app, "T", 1)

    out = app.invoke(None, thread_id="T", checkpoint_id=after_a.checkpoint_id)
    assert out["log"] == ["a1", "b2", "c2"], "a is not re-run; b and c run again"

    new = app.get_state_history("T")
    assert [h.step for h in new] == [3, 2, 1, 1, 0]
    assert [h.source for h in new] == ["loop", "loop", "replay", "loop", "input"]
    assert new[3].checkpoint_id == after_a.checkpoint_id, "the new branch grows from the chosen checkpoint"
    assert new[2].parent_id == after_a.checkpoint_id and new[2].values == after_a.values
    assert new[2].metadata["replayed_from"] == after_a.checkpoint_id
    assert {h.checkpoint_id for h in new[:3]}.isdisjoint({h.checkpoint_id for h in old})
    assert app.get_state("T").values["log"] == ["a1", "b2", "c2"]
    # the old branch stays readable by id
    assert app.get_state("T", old[0].checkpoint_id).values["log"] == ["a1", "b1", "c1"]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_replay_that_pauses_or_fails_in_its_first_step_is_the_threads_head(backend: str, tmp_path: Any) -> None:
    """Time travel to a checkpoint whose next node pauses (or fails): the thread shows the
    pause (or the failure) at once, and Command(resume=...) answers it on the thread."""
    from plait import Command, interrupt

    schema = StateSchema.builder().add("log", AppendList()).build()
    fail = {"b": False}

    def a(state: Any) -> Any:
        return {"log": ["a"]}

    def b(state: Any) -> Any:
        if fail["b"]:
            raise RuntimeError("b broke")
        return {"log": [f"b:{interrupt('go on?')}"]}

    g = Graph(schema).add_node("a", a).add_node("b", b).add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    saver = MemoryCheckpointer() if backend == "memory" else SqliteCheckpointer(tmp_path / "t.db")
    app = g.compile(saver)
    app.invoke({}, thread_id="T")
    assert app.invoke(Command(resume="yes"), thread_id="T")["log"] == ["a", "b:yes"]
    after_a = at_step(app, "T", 1)
    out = app.invoke(None, thread_id="T", checkpoint_id=after_a.checkpoint_id)
    assert "__interrupt__" in out
    state = app.get_state("T")
    assert state.next == ("b",) and [i.value for i in state.interrupts] == ["go on?"]
    assert state.source == "replay" and state.parent_id == after_a.checkpoint_id
    assert app.invoke(Command(resume="again"), thread_id="T")["log"] == ["a", "b:again"]

    fail["b"] = True
    with pytest.raises(NodeError):
        app.invoke(None, thread_id="T", checkpoint_id=after_a.checkpoint_id)
    state = app.get_state("T")
    assert state.next == ("b",) and state.source == "replay"
    assert state.error is not None and state.error.node == "b" and "b broke" in state.error.message


def test_invoking_from_an_unknown_checkpoint_is_checkpoint_not_found() -> None:
    app = abc()
    app.invoke({}, thread_id="T")
    with pytest.raises(CheckpointNotFoundError):
        app.invoke(None, thread_id="T", checkpoint_id="0000000000000000000000")


# -- update_state ----------------------------------------------------------------------------


def test_update_state_folds_through_the_reducers_and_keeps_the_next_tasks() -> None:
    app = abc()
    app.invoke({"topic": "x"}, thread_id="T")
    head = app.get_state("T")
    cid = app.update_state("T", {"log": ["manual"], "topic": "y"})
    state = app.get_state("T")
    assert state.checkpoint_id == cid
    assert state.parent_id == head.checkpoint_id
    assert state.source == "update"
    assert state.values == {"log": ["a1", "b1", "c1", "manual"], "topic": "y"}
    assert state.next == ()


def test_update_state_accepts_key_value_pairs_folded_in_order() -> None:
    app = abc()
    app.invoke({}, thread_id="T")
    app.update_state("T", [("log", "p1"), ("topic", "first"), ("log", "p2"), ("topic", "second")])
    assert app.get_state("T").values == {"log": ["a1", "b1", "c1", "p1", "p2"], "topic": "second"}


def test_update_state_as_a_node_makes_its_successors_next() -> None:
    counted = Counted()
    app = abc(counted)
    app.invoke({}, thread_id="T")
    app.update_state("T", {"log": ["as-a"]}, as_node="a")
    assert app.get_state("T").next == ("b",)
    out = app.invoke(None, thread_id="T")
    assert out["log"] == ["a1", "b1", "c1", "as-a", "b2", "c2"]
    assert counted.calls["a"] == 1


def test_update_state_as_an_unknown_node_is_missing_node() -> None:
    app = abc()
    app.invoke({}, thread_id="T")
    with pytest.raises(MissingNodeError) as info:
        app.update_state("T", {"log": ["x"]}, as_node="ghost")
    assert info.value.node == "ghost"


def test_update_state_as_a_node_that_routes_only_by_command_is_refused() -> None:
    g = Graph(schema())
    g.add_node("router", lambda s: Command(goto="x"), destinations=["x"]).add_node("x", lambda s: None)
    app = g.add_edge(START, "router").compile(MemoryCheckpointer())
    app.invoke({}, thread_id="T")
    with pytest.raises(GraphError, match="'router'.*Command"):
        app.update_state("T", {"log": ["x"]}, as_node="router")


def test_update_state_before_any_checkpoint_starts_the_thread() -> None:
    app = abc()
    app.update_state("nobody", {"log": ["x"]})
    assert app.get_state("nobody").values["log"] == ["x"]


def test_bulk_update_state_applies_updates_in_order() -> None:
    app = abc()
    app.invoke({}, thread_id="T")
    before = len(app.get_state_history("T"))
    last = app.bulk_update_state("T", [{"topic": "one"}, ({"log": ["two"], "topic": "two"}, "b")])
    state = app.get_state("T")
    assert state.checkpoint_id == last
    assert state.values == {"log": ["a1", "b1", "c1", "two"], "topic": "two"}
    assert state.next == ("c",)
    history = app.get_state_history("T")
    assert len(history) == before + 2
    assert history[1].values["topic"] == "one"


def test_bulk_update_state_with_no_updates_is_an_error() -> None:
    app = abc()
    app.invoke({}, thread_id="T")
    with pytest.raises(GraphError, match="at least one"):
        app.bulk_update_state("T", [])


# -- forks ---------------------------------------------------------------------------------


def test_fork_state_copies_a_checkpoint_as_the_root_of_a_new_thread() -> None:
    app = abc()
    app.invoke({"topic": "x"}, thread_id="T")
    source_history = app.get_state_history("T")
    after_a = at_step(app, "T", 1)

    cid = app.fork_state("T", after_a.checkpoint_id, "T2")
    root = app.get_state("T2")
    assert root.checkpoint_id == cid
    assert root.parent_id is None
    assert root.source == "fork"
    assert root.values == after_a.values
    assert root.next == ("b",)
    assert root.metadata["forked_from"] == {"thread_id": "T", "checkpoint_id": after_a.checkpoint_id}
    assert [h.checkpoint_id for h in app.get_state_history("T2")] == [cid]

    out = app.invoke(None, thread_id="T2")
    assert out["log"] == ["a1", "b2", "c2"]
    assert app.get_state_history("T") == source_history, "the source thread is unchanged"


def test_fork_with_edits_folds_them_through_the_reducers() -> None:
    app = abc()
    app.invoke({"topic": "x"}, thread_id="T")
    head = app.get_state("T")
    app.fork("T", "T3", edits={"log": ["edited"], "topic": "y"})
    root = app.get_state("T3")
    assert (root.parent_id, root.source) == (None, "fork")
    assert root.values == {"log": ["a1", "b1", "c1", "edited"], "topic": "y"}
    assert app.get_state("T") == head


def chat(saver: Checkpointer) -> CompiledGraph:
    g = Graph(StateSchema.builder().add("messages", AppendMessages()).add_lww("topic").build())
    g.add_node("bot", lambda s: {"topic": "chat"}).add_edge(START, "bot").add_edge("bot", END)
    return g.compile(saver)


@pytest.mark.parametrize("as_node", [None, "bot"])
def test_update_state_names_its_messages_by_the_checkpoint_it_creates(
    make_saver: Callable[..., Checkpointer], as_node: str | None
) -> None:
    app = chat(make_saver())
    app.invoke({}, thread_id="t")
    yes = {"role": "user", "content": "yes"}
    first = app.update_state("t", {"messages": [yes, yes]}, as_node=as_node)
    second = app.update_state("t", [("messages", yes)], as_node=as_node)
    messages = app.get_state("t").values["messages"]
    assert [m["content"] for m in messages] == ["yes"] * 3, "three times yes is three messages"
    assert [m["id"] for m in messages] == [message_id(first, 0), message_id(first, 1), message_id(second, 0)]


def test_fork_edits_name_their_messages_by_the_fork_s_checkpoint(make_saver: Callable[..., Checkpointer]) -> None:
    app = chat(make_saver())
    yes = {"role": "user", "content": "yes"}
    app.invoke({"messages": [yes]}, thread_id="t")
    root = app.fork("t", "t2", edits={"messages": [yes]})
    messages = app.get_state("t2").values["messages"]
    assert app.get_state("t2").checkpoint_id == root
    assert [m["content"] for m in messages] == ["yes", "yes"]
    assert messages[1]["id"] == message_id(root, 0) != messages[0]["id"]
    assert [m["content"] for m in app.get_state("t").values["messages"]] == ["yes"], "the source is untouched"


def test_two_branches_never_give_one_id_to_two_messages(make_saver: Callable[..., Checkpointer]) -> None:
    """A fork copies the planned tasks with their ids; the messages those tasks write on the
    fork are still named apart from the ones they wrote on the source, so an id-based diff
    of the two branches sees two messages, not one changed in place."""
    said = iter(["first answer", "second answer"])

    def bot(state: Any) -> Any:
        return {"messages": [{"role": "assistant", "content": next(said)}]}

    g = Graph(StateSchema.builder().add("messages", AppendMessages()).build())
    g.add_node("bot", bot).add_edge(START, "bot").add_edge("bot", END)
    app = g.compile(make_saver(), interrupt_before=["bot"])
    app.invoke({"messages": [{"role": "user", "content": "hi"}]}, thread_id="a")
    app.fork("a", "b")
    app.invoke(None, thread_id="a")
    app.invoke(None, thread_id="b")
    a, b = (app.get_state(t).values["messages"] for t in ("a", "b"))
    assert a[0] == b[0], "what both branches share keeps its id"
    assert (a[1]["content"], b[1]["content"]) == ("first answer", "second answer")
    assert a[1]["id"] != b[1]["id"]
    (messages,) = diff_values({"messages": a}, {"messages": b})
    assert messages.kind == "messages"
    assert (messages.updated, messages.appended, messages.removed_items) == ((), (b[1],), (a[1],))


def test_fork_of_an_unknown_thread_is_checkpoint_not_found() -> None:
    with pytest.raises(CheckpointNotFoundError):
        abc().fork("ghost", "T2")


def test_diff_threads_gives_the_first_diverging_step_and_keys() -> None:
    app = abc()
    app.invoke({"topic": "x"}, thread_id="T")
    app.fork_state("T", at_step(app, "T", 1).checkpoint_id, "same")
    assert not app.diff_threads("T", "T")

    after_a = at_step(app, "T", 2)
    app.fork("T", "T2", checkpoint_id=after_a.checkpoint_id, edits={"topic": "y"})
    app.invoke(None, thread_id="T2")
    d = app.diff_threads("T", "T2")
    assert d.first_step == 2
    assert d.keys == ("topic",)
    assert d.a is not None and d.b is not None
    assert (d.a.values["topic"], d.b.values["topic"]) == ("x", "y")
    assert "log" in d.heads.keys and "topic" in d.heads.keys


# -- graph changes -------------------------------------------------------------------------


def asking_graph(log_reducer: Any = None, with_ask: bool = True) -> Graph:
    g = Graph(schema(log_reducer)).add_node("pre", lambda s: {"log": ["pre"]})
    g.add_node("post", lambda s: {"topic": "done"}).add_edge(START, "pre")
    if with_ask:
        g.add_node("ask", lambda s: {"topic": interrupt("topic?")})
        g.add_edge("pre", "ask").add_edge("ask", "post")
    else:
        g.add_edge("pre", "post")
    return g


def test_resuming_on_a_graph_without_the_pending_node_is_graph_changed() -> None:
    saver = MemoryCheckpointer()
    asking_graph().compile(saver).invoke({}, thread_id="t")
    changed = asking_graph(with_ask=False).compile(saver)
    with pytest.raises(GraphChangedError, match="'ask'") as info:
        changed.invoke(Command(resume="x"), thread_id="t")
    assert info.value.thread_id == "t"
    assert any("ask" in c for c in info.value.changes)
    assert asking_graph().compile(saver).invoke(Command(resume="x"), thread_id="t")["topic"] == "done"


def test_resuming_on_a_graph_whose_reducer_changed_is_graph_changed() -> None:
    saver = MemoryCheckpointer()
    asking_graph().compile(saver).invoke({}, thread_id="t")
    changed = asking_graph(log_reducer=LastWriteWins()).compile(saver)
    with pytest.raises(GraphChangedError, match="'log'") as info:
        changed.invoke(Command(resume="x"), thread_id="t")
    assert any("AppendList" in c and "LastWriteWins" in c for c in info.value.changes)


def test_a_compatible_graph_change_resumes() -> None:
    saver = MemoryCheckpointer()
    asking_graph().compile(saver).invoke({}, thread_id="t")
    g = asking_graph().add_node("extra", lambda s: None).add_edge("post", "extra")
    assert g.compile(saver).invoke(Command(resume="x"), thread_id="t")["topic"] == "done"


def test_a_changed_reducer_is_detected_on_a_thread_run_with_exit_durability() -> None:
    saver = MemoryCheckpointer()
    asking_graph().compile(saver).invoke({}, thread_id="t", durability="exit")
    changed = asking_graph(log_reducer=LastWriteWins()).compile(saver)
    with pytest.raises(GraphChangedError, match="'log'"):
        changed.invoke(Command(resume="x"), thread_id="t")


def test_a_changed_reducer_is_detected_after_the_thread_was_pruned() -> None:
    saver = MemoryCheckpointer()
    app = asking_graph().compile(saver)
    app.invoke({}, thread_id="t")
    assert app.prune("t", keep_last=1) == 1
    changed = asking_graph(log_reducer=LastWriteWins()).compile(saver)
    with pytest.raises(GraphChangedError, match="'log'"):
        changed.invoke(Command(resume="x"), thread_id="t")


def test_namespaces_keep_threads_of_two_graphs_apart_in_one_store() -> None:
    saver = MemoryCheckpointer()
    g = Graph(schema()).add_node("a", lambda s: {"log": [s["topic"]]}).add_edge(START, "a")
    left, right = g.compile(saver, namespace="left"), g.compile(saver, namespace="right")
    left.invoke({"topic": "L"}, thread_id="t")
    right.invoke({"topic": "R"}, thread_id="t")
    assert left.get_state("t").values == {"log": ["L"], "topic": "L"}
    assert right.get_state("t").values == {"log": ["R"], "topic": "R"}
    assert [t.namespace for t in left.list_threads()] == ["left"]


def test_the_sync_api_works_inside_a_running_event_loop() -> None:
    app = abc()

    async def main() -> dict[str, Any]:
        return app.invoke({}, thread_id="t")

    assert asyncio.run(main())["log"] == ["a1", "b1", "c1"]


def test_update_state_on_a_thread_that_is_running_is_thread_busy() -> None:
    async def main() -> dict[str, Any]:
        started, release = asyncio.Event(), asyncio.Event()

        async def blocker(state: Any) -> Any:
            started.set()
            await asyncio.wait_for(release.wait(), 5)
            return {"log": ["done"]}

        app = Graph(schema()).add_node("b", blocker).add_edge(START, "b").compile(MemoryCheckpointer())
        run = asyncio.create_task(app.ainvoke({}, thread_id="t"))
        await started.wait()
        try:
            with pytest.raises(ThreadBusyError):
                await app.aupdate_state("t", {"topic": "sneaky"})
        finally:
            release.set()
        return await run

    assert asyncio.run(main()) == {"log": ["done"]}


def test_resuming_on_a_graph_without_a_channel_that_holds_a_value_is_graph_changed() -> None:
    saver = MemoryCheckpointer()
    asking_graph().compile(saver).invoke({"topic": "kept"}, thread_id="t")
    narrow = StateSchema.builder().add("log", AppendList()).build()
    g = Graph(narrow).add_node("pre", lambda s: None).add_node("ask", lambda s: None).add_node("post", lambda s: None)
    g.add_edge(START, "pre").add_edge("pre", "ask").add_edge("ask", "post")
    with pytest.raises(GraphChangedError, match="'topic'"):
        g.compile(saver).invoke(Command(resume="x"), thread_id="t")


def test_a_fork_keeps_interrupts_but_not_the_effects_ledger() -> None:
    """The fork is a new lineage: its task re-runs the effect (new idempotency key); the
    source, resumed, does not."""
    charges: list[str] = []

    def pay(state: Any, ctx: Any) -> Any:
        def charge() -> str:
            charges.append(ctx.thread_id)
            return f"r{len(charges)}"

        receipt = ctx.once("charge", charge)
        answer = interrupt("confirm?")
        return {"log": [f"{receipt}:{answer}"]}

    app = Graph(schema()).add_node("pay", pay).add_edge(START, "pay").compile(MemoryCheckpointer())
    app.invoke({}, thread_id="src")
    app.fork("src", "copy")
    assert [i.value for i in app.get_state("copy").interrupts] == ["confirm?"]
    assert app.invoke(Command(resume="yes"), thread_id="src")["log"] == ["r1:yes"]
    assert app.invoke(Command(resume="no"), thread_id="copy")["log"] == ["r2:no"]
    assert charges == ["src", "copy"]


# -- how threads stand -------------------------------------------------------------------------


def _status_graph(saver: Any, gate: dict[str, Any]) -> Any:
    from plait import interrupt

    schema = StateSchema.builder().add("log", AppendList()).add_lww("mode").build()

    async def work(state: Any) -> Any:
        mode = state.get("mode")
        if mode == "fail":
            raise ValueError("the model refused")
        if mode == "ask":
            return {"log": [interrupt("approve?")]}
        if mode == "hang":
            gate["started"].set()
            await asyncio.sleep(30)
        if mode == "look":
            gate["seen"] = saver.get_thread("look").status if hasattr(saver, "get_thread") else None
        return {"log": ["done"]}

    return Graph(schema).add_node("work", work).add_edge(START, "work").add_edge("work", END).compile(saver)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_every_thread_says_how_it_stands_and_keeps_its_error(backend: str, tmp_path: Any) -> None:
    saver = MemoryCheckpointer() if backend == "memory" else SqliteCheckpointer(tmp_path / "s.db")
    gate: dict[str, Any] = {"started": asyncio.Event()}
    app = _status_graph(saver, gate)
    app.invoke({"mode": "ok"}, thread_id="done")
    app.invoke({"mode": "ask"}, thread_id="asking")
    with pytest.raises(NodeError):
        app.invoke({"mode": "fail"}, thread_id="failed")
    app.invoke({"mode": "look"}, thread_id="look")
    assert gate["seen"] == "busy", "a thread reads busy while its run goes on"

    async def cancelled() -> None:
        task = asyncio.ensure_future(app.ainvoke({"mode": "hang"}, thread_id="cut"))
        await gate["started"].wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    statuses = {t.thread_id: t.status for t in app.list_threads()}
    assert statuses == {"done": "idle", "asking": "interrupted", "failed": "error", "look": "idle", "cut": "ready"}
    failed = app.get_state("failed")
    assert failed.status == "error" and failed.next == ("work",)
    assert failed.error is not None and failed.error.node == "work" and failed.error.step == 0
    assert failed.error.type == "builtins.ValueError" and failed.error.message == "the model refused"
    assert "the model refused" in failed.error.traceback and failed.error.error == "NodeError"
    assert app.get_state("asking").status == "interrupted" and app.get_state("done").status == "idle"
    assert [t.thread_id for t in app.list_threads(status="error")] == ["failed"]
    page = app.list_threads(limit=2)
    rest = app.list_threads(before=page[-1].cursor)
    assert [t.thread_id for t in page + rest] == [t.thread_id for t in app.list_threads()]
    app.invoke({"mode": "ok"}, thread_id="failed")  # a new run on it succeeds: the error is gone
    assert app.get_state("failed").status == "idle" and app.get_state("failed").error is None
    saver.close() if backend == "sqlite" else None


def test_the_restart_idiom_needs_no_exception() -> None:
    app = _status_graph(MemoryCheckpointer(), {"started": asyncio.Event()})
    assert app.get_state("new", default=None) is None
    assert not app.has_thread("new")
    app.invoke({"mode": "ok"}, thread_id="new")
    assert app.has_thread("new") and app.get_state("new", default=None) is not None
    with pytest.raises(CheckpointNotFoundError):
        app.get_state("other")


def test_a_run_takes_the_thread_lease_under_the_owner_it_is_given() -> None:
    saver = MemoryCheckpointer()
    seen: list[str] = []

    def peek(state: Any) -> dict[str, Any]:
        info = saver.get_thread("owned")
        assert info is not None and info.lease is not None
        seen.append(info.lease.owner)
        return {"log": ["peeked"]}

    graph = Graph(schema())
    graph.add_node("peek", peek).add_edge(START, "peek").add_edge("peek", END)
    graph.compile(checkpointer=saver).invoke({"log": []}, thread_id="owned", owner="worker-7:claim-1")
    assert seen == ["worker-7:claim-1"]
