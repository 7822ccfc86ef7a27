"""Subgraphs: a compiled graph as a node, its checkpoints in a child namespace of the parent's
thread, interrupts inside it, nested state and streams, and its commits fenced by the
parent's lease."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import (
    END,
    START,
    AppendList,
    Checkpointer,
    Command,
    Graph,
    GraphError,
    LeaseLostError,
    NodeContext,
    Send,
    Sum,
    interrupt,
)
from plait.engine.subgraph import child_namespace

from .test_fencing import Steal, backend  # noqa: F401 - the fixture: every backend, its lease stealable


class Inner(TypedDict):
    topic: str
    notes: Annotated[list[str], AppendList]
    count: Annotated[int, Sum]
    private: str


class Outer(TypedDict):
    topic: str
    notes: Annotated[list[str], AppendList]
    count: Annotated[int, Sum]
    answer: str


def _inner(calls: list[str]) -> Graph:
    def a(s: Any) -> Any:
        calls.append("a")
        return {"private": "p", "notes": ["a:" + s["topic"]], "count": 1}

    def b(s: Any) -> Any:
        calls.append("b")
        return {"notes": ["b:" + s["private"]], "count": 2}

    return Graph(Inner).add_node("a", a).add_node("b", b).add_edge(START, "a").add_edge("a", "b").add_edge("b", END)


def _outer(inner: Any) -> Graph:
    def fin(s: Any) -> Any:
        return {"answer": ",".join(s["notes"])}

    g = Graph(Outer).add_node("research", inner).add_node("fin", fin)
    return g.add_edge(START, "research").add_edge("research", "fin").add_edge("fin", END)


def test_a_subgraph_shares_keys_by_name_and_keeps_its_own_private(make_saver: Callable[..., Checkpointer]) -> None:
    calls: list[str] = []
    saver = make_saver()
    app = _outer(_inner(calls).compile()).compile(saver)
    out = app.invoke({"topic": "x", "notes": ["start"], "count": 10}, thread_id="t")
    # appends and sums come back once each, not on top of the values passed in
    assert out == {"topic": "x", "notes": ["start", "a:x", "b:p"], "count": 13, "answer": "start,a:x,b:p"}
    assert "private" not in out
    task = next(h for h in app.get_state_history("t") if h.next == ("research",)).tasks[0]
    ns = child_namespace("", "research", task.id)
    child = asyncio.run(saver.aget("t", namespace=ns))
    assert child is not None and child.values["private"] == "p" and child.next_tasks == ()
    assert [cp.step for cp in asyncio.run(saver.ahistory("t", namespace=ns))] == [2, 1, 0]
    assert calls == ["a", "b"]


def test_a_builder_as_a_node_and_no_checkpointer() -> None:
    out = _outer(_inner([])).compile().invoke({"topic": "y"})
    assert out["notes"] == ["a:y", "b:p"] and out["count"] == 3


def test_an_interrupt_inside_a_subgraph_pauses_the_parent_and_resumes_in_place(
    make_saver: Callable[..., Checkpointer],
) -> None:
    runs: list[str] = []

    class S(TypedDict):
        topic: str
        ok: str

    def ask(s: Any) -> Any:
        runs.append("ask")
        return {"ok": interrupt("approve " + s["topic"])}

    def ask2(s: Any) -> Any:
        runs.append("ask2")
        return {"ok": s["ok"] + "+" + interrupt("again")}

    inner = Graph(S).add_node("ask", ask).add_node("ask2", ask2)
    inner.add_edge(START, "ask").add_edge("ask", "ask2").add_edge("ask2", END)
    app = Graph(S).add_node("sub", inner.compile()).add_edge(START, "sub").add_edge("sub", END).compile(make_saver())
    first = app.invoke({"topic": "q"}, thread_id="t")
    (pause,) = first["__interrupt__"]
    assert (pause.value, pause.node, pause.index) == ("approve q", "sub", 0)
    state = app.get_state("t", subgraphs=True)
    assert state.next == ("sub",) and state.interrupts == (pause,)
    assert state.subgraphs is not None
    (child,) = state.subgraphs.values()
    assert child.next == ("ask",) and child.interrupts[0].value == "approve q"
    assert state.to_json()["subgraphs"] == {key: child.to_json() for key, child in state.subgraphs.items()}
    assert "subgraphs" not in app.get_state("t").to_json()
    # continuing without an answer asks the same question again
    assert app.invoke(None, thread_id="t")["__interrupt__"] == [pause]
    second = app.invoke(Command(resume="yes"), thread_id="t")["__interrupt__"][0]
    assert (second.value, second.index) == ("again", 1)
    assert app.invoke(Command(resume="sure"), thread_id="t") == {"topic": "q", "ok": "yes+sure"}
    # ask ran for its question and its answer; ask2 likewise: no finished step ran again
    assert runs == ["ask", "ask", "ask", "ask2", "ask2"]
    assert app.get_state("t").next == ()


def test_stream_with_subgraphs_yields_namespaced_items(make_saver: Callable[..., Checkpointer]) -> None:
    app = _outer(_inner([]).compile()).compile(make_saver())
    items = list(app.stream({"topic": "z"}, thread_id="t", mode="updates", subgraphs=True))
    namespaces = [ns for ns, _ in items]
    assert namespaces[2:] == [(), ()]
    assert len(namespaces[0]) == 1 and namespaces[0][0].startswith("research:") and namespaces[0] == namespaces[1]
    assert [item for _, item in items][:2] == [
        {"a": {"private": "p", "notes": ["a:z"], "count": 1}},
        {"b": {"notes": ["b:p"], "count": 2}},
    ]
    assert items[2][1] == {"research": {"notes": ["a:z", "b:p"], "count": 3}}
    plain = list(app.stream({"topic": "z"}, thread_id="u", mode="updates"))
    assert [next(iter(p)) for p in plain] == ["research", "fin"], "without subgraphs=True only the parent's"


def test_three_levels_nest_namespaces_and_a_node_may_call_a_subgraph(
    make_saver: Callable[..., Checkpointer],
) -> None:
    class S(TypedDict):
        log: Annotated[list[str], AppendList]

    leaf = Graph(S).add_node("leaf", lambda s: {"log": ["leaf"]}).add_edge(START, "leaf").compile()
    mid = Graph(S).add_node("deep", leaf).add_edge(START, "deep").compile()

    async def caller(s: Any, ctx: NodeContext) -> Any:
        one = await ctx.subgraph(mid, {"log": ["x"]})
        two = await leaf.ainvoke({"log": ["y"]})  # inside a node: a subgraph call too
        return {"log": [*one["log"], *two["log"]]}

    saver = make_saver()
    app = Graph(S).add_node("mid", mid).add_node("caller", caller)
    app.add_edge(START, "mid").add_edge("mid", "caller")
    out = app.compile(saver).invoke({"log": []}, thread_id="t")
    assert out == {"log": ["leaf", "x", "leaf", "y", "leaf"]}
    tasks = {t.node: t.id for h in app.compile(saver).get_state_history("t") for t in h.tasks}
    for ns in (f"mid:{tasks['mid']}", f"caller:{tasks['caller']}#0", f"caller:{tasks['caller']}#1"):
        child = asyncio.run(saver.aget("t", namespace=ns))
        assert child is not None and child.next_tasks == (), ns
    mid_task = next(
        t.id for h in asyncio.run(saver.ahistory("t", namespace=f"mid:{tasks['mid']}")) for t in h.next_tasks
    )
    leaf_ns = f"mid:{tasks['mid']}|deep:{mid_task}"
    assert leaf_ns.count("|") == 1 and asyncio.run(saver.aget("t", namespace=leaf_ns)) is not None
    app.compile(saver).delete_thread("t")  # the subgraphs' runs go with the thread
    for ns in ("", f"mid:{tasks['mid']}", leaf_ns, f"caller:{tasks['caller']}#0", f"caller:{tasks['caller']}#1"):
        assert asyncio.run(saver.aget("t", namespace=ns)) is None, ns


def test_a_parent_that_lost_its_lease_cannot_write_its_subgraphs_checkpoints(
    backend: tuple[Checkpointer, Steal],  # noqa: F811 - the fixture imported above
) -> None:
    saver, steal = backend
    after: list[str] = []

    class S(TypedDict):
        log: Annotated[list[str], AppendList]

    def stolen(s: Any) -> Any:
        steal()  # the parent's lease is taken over while its subgraph runs
        return {"log": ["stolen"]}

    def later(s: Any) -> Any:
        after.append("later")
        return {"log": ["later"]}

    inner = Graph(S).add_node("stolen", stolen).add_node("later", later)
    inner.add_edge(START, "stolen").add_edge("stolen", "later")
    app = Graph(S).add_node("sub", inner.compile()).add_edge(START, "sub").compile(saver)
    with pytest.raises(LeaseLostError):
        app.invoke({"log": []}, thread_id="t")
    assert after == []
    head = asyncio.run(saver.aget("t"))
    assert head is not None
    ns = child_namespace("", "sub", head.next_tasks[0].id)
    steps = [cp.step for cp in asyncio.run(saver.ahistory("t", namespace=ns))]
    assert steps == [0], "the child's input checkpoint only: nothing after the steal"


class Ask(TypedDict):
    topic: str
    ok: str


def _asking_app(saver: Checkpointer, runs: list[str]) -> Any:
    def draft(s: Any) -> Any:
        runs.append("draft")
        return {"topic": s["topic"] + "!"}

    def ask(s: Any) -> Any:
        runs.append("ask")
        return {"ok": s["topic"] + ":" + interrupt("approve?")}

    inner = Graph(Ask).add_node("draft", draft).add_node("ask", ask)
    inner.add_edge(START, "draft").add_edge("draft", "ask").add_edge("ask", END)
    return Graph(Ask).add_node("sub", inner.compile()).add_edge(START, "sub").add_edge("sub", END).compile(saver)


def test_update_state_addresses_a_subgraph_and_the_resume_continues_from_it(
    make_saver: Callable[..., Checkpointer],
) -> None:
    runs: list[str] = []
    app = _asking_app(make_saver(), runs)
    app.invoke({"topic": "t"}, thread_id="t")
    (key,) = app.get_state("t", subgraphs=True).subgraphs
    app.update_state("t", {"topic": "edited"}, subgraph=key)
    child = app.get_state("t", subgraphs=True).subgraphs[key]
    assert child.values["topic"] == "edited" and child.source == "update" and child.next == ("ask",)
    assert app.invoke(Command(resume="yes"), thread_id="t") == {"topic": "edited", "ok": "edited:yes"}
    assert runs == ["draft", "ask", "ask"], "draft did not run again"
    with pytest.raises(GraphError):
        app.update_state("t", {"topic": "x"}, subgraph="nosuch:123")


def test_a_fork_of_a_paused_thread_carries_its_subgraph_and_time_travel_reruns_it(
    make_saver: Callable[..., Checkpointer],
) -> None:
    runs: list[str] = []
    app = _asking_app(make_saver(), runs)
    app.invoke({"topic": "t"}, thread_id="t")
    app.fork("t", "f")
    assert app.get_state("f", subgraphs=True).subgraphs, "the fork has the subgraph's run"
    assert app.invoke(Command(resume="in fork"), thread_id="f") == {"topic": "t!", "ok": "t!:in fork"}
    assert app.invoke(Command(resume="in source"), thread_id="t")["ok"] == "t!:in source"
    assert runs == ["draft", "ask", "ask", "ask"], "neither resume ran draft again"
    # time travel to the input checkpoint: a branch whose subgraph runs afresh
    first = app.get_state_history("t")[-1]
    again = app.invoke(None, thread_id="t", checkpoint_id=first.checkpoint_id)
    assert again["__interrupt__"][0].value == "approve?" and runs[-2:] == ["draft", "ask"]
    assert app.invoke(Command(resume="branch"), thread_id="t")["ok"] == "t!:branch"


def test_a_sync_nodes_invoke_stays_a_plain_run_and_sends_may_target_a_subgraph(
    make_saver: Callable[..., Checkpointer],
) -> None:
    class S(TypedDict):
        log: Annotated[list[str], AppendList]
        n: int

    leaf = Graph(S).add_node("leaf", lambda s: {"log": [f"leaf{s.get('n', -1)}"]}).add_edge(START, "leaf").compile()

    def sync_caller(s: Any) -> Any:
        return {"log": leaf.invoke({"log": ["y"]})["log"]}

    saver = make_saver()
    app = Graph(S).add_node("c", sync_caller).add_edge(START, "c").compile(saver)
    assert app.invoke({"log": []}, thread_id="t") == {"log": ["y", "leaf-1"]}
    (task,) = app.get_state_history("t")[-1].tasks
    # as before subgraphs: a plain run, not checkpointed (a sync node cannot hand the run's
    # loop to a subgraph; an async node's ``await leaf.ainvoke(x)`` is one)
    assert asyncio.run(saver.aget("t", namespace=f"c:{task.id}#0")) is None
    fan = Graph(S).add_node("sub", leaf)
    fan.add_conditional_edges(START, lambda s: [Send("sub", {"n": i}) for i in range(3)])
    for durability in ("sync", "async", "exit"):
        out = fan.compile(saver).invoke({"log": []}, thread_id=f"fan-{durability}", durability=durability)
        assert out == {"log": ["leaf0", "leaf1", "leaf2"]}, durability


def test_an_interrupt_in_a_subgraph_a_node_calls_resumes_that_call(make_saver: Callable[..., Checkpointer]) -> None:
    calls: list[str] = []

    def ask(s: Any) -> Any:
        return {"ok": interrupt(s["topic"])}

    inner = Graph(Ask).add_node("ask", ask).add_edge(START, "ask").compile()

    async def caller(s: Any, ctx: NodeContext) -> Any:
        calls.append("caller")
        first = await ctx.subgraph(inner, {"topic": "one?"})
        second = await ctx.subgraph(inner, {"topic": "two?"})
        return {"ok": first["ok"] + second["ok"]}

    app = Graph(Ask).add_node("caller", caller).add_edge(START, "caller").compile(make_saver())
    assert app.invoke({"topic": "x"}, thread_id="t")["__interrupt__"][0].value == "one?"
    assert app.invoke(Command(resume="1"), thread_id="t")["__interrupt__"][0].value == "two?"
    assert app.invoke(Command(resume="2"), thread_id="t") == {"topic": "x", "ok": "12"}
    assert calls == ["caller"] * 3
