"""The spans of a run, read back as a tree: run, steps, task attempts, effects and
subgraphs nested as they happened; statuses, attributes and events; the link from a resume
to the run that paused."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from plait import (
    END,
    START,
    AppendList,
    Command,
    Graph,
    MemoryCheckpointer,
    NodeContext,
    NodeError,
    RetryPolicy,
    interrupt,
)

from ._tree import Tree


class S(TypedDict):
    log: Annotated[list[str], AppendList]


def _say(word: str) -> Any:
    def node(state: Any) -> Any:
        return {"log": [word]}

    return node


def _fan() -> Graph:
    """START -> a, b (one step, in parallel) -> c -> END."""
    g = Graph(S).add_node("a", _say("a")).add_node("b", _say("b")).add_node("c", _say("c"))
    return g.add_edge(START, "a").add_edge(START, "b").add_edge("a", "c").add_edge("b", "c").add_edge("c", END)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_a_run_is_a_span_with_a_span_per_step_and_per_task(exporter: InMemorySpanExporter, durability: Any) -> None:
    cp = MemoryCheckpointer()
    app = _fan().compile(cp, name="fan", namespace="ns1")
    assert sorted(app.invoke({}, thread_id="t1", durability=durability)["log"]) == ["a", "b", "c"]
    tree = Tree(exporter.get_finished_spans())
    run = tree.one("plait.run")
    assert tree.roots() == [run]
    assert {s.context.trace_id for s in tree.spans} == {run.context.trace_id}
    head = app.get_state("t1")
    attrs = dict(run.attributes or {})
    assert attrs["plait.thread_id"] == "t1" and attrs["plait.namespace"] == "ns1"
    assert attrs["plait.durability"] == durability and attrs["plait.graph.name"] == "fan"
    assert attrs["plait.status"] == "done" and attrs["plait.checkpoint_id"] == head.checkpoint_id
    assert attrs["plait.run_id"] == head.metadata["run_id"]
    assert run.status.status_code is StatusCode.UNSET
    steps = tree.children(run, "plait.step")
    assert [s.attributes["plait.step"] for s in steps if s.attributes] == [0, 1]
    first, second = steps
    assert sorted(s.name for s in tree.children(first)) == ["plait.task a", "plait.task b"]
    assert [s.name for s in tree.children(second)] == ["plait.task c"]
    assert tree.children(run) == steps  # nothing else directly under the run
    for task in tree.named("plait.task a") + tree.named("plait.task c"):
        assert task.attributes is not None and task.attributes["plait.attempt"] == 1
        assert task.attributes["plait.thread_id"] == "t1"
        assert task.attributes["plait.step"] == tree.parent(task).attributes["plait.step"]  # type: ignore[index]
    # each stored checkpoint is an event on the span that was open when it was committed
    stored = {c.checkpoint_id for c in app.get_state_history("t1")}
    events = [e for s in tree.spans for e in s.events if e.name == "plait.checkpoint"]
    assert {e.attributes["plait.checkpoint_id"] for e in events if e.attributes} == stored


def test_the_attempts_of_a_retried_task_are_sibling_spans(exporter: InMemorySpanExporter) -> None:
    calls = [0]

    def flaky(state: Any) -> Any:
        calls[0] += 1
        if calls[0] < 3:
            raise ConnectionError(f"flaky {calls[0]}")
        return {"log": ["ok"]}

    policy = RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0)
    g = Graph(S).add_node("flaky", flaky, retry=policy).add_edge(START, "flaky").add_edge("flaky", END)
    assert g.compile(MemoryCheckpointer()).invoke({}, thread_id="r")["log"] == ["ok"]
    tree = Tree(exporter.get_finished_spans())
    attempts = tree.named("plait.task flaky")
    assert [a.attributes["plait.attempt"] for a in attempts if a.attributes] == [1, 2, 3]
    (step,) = {tree.parent(a).context.span_id for a in attempts}
    assert [a.status.status_code for a in attempts] == [StatusCode.ERROR, StatusCode.ERROR, StatusCode.UNSET]
    for n, failed in enumerate(attempts[:2], 1):
        (event,) = [e for e in failed.events if e.name == "exception"]
        assert event.attributes is not None and f"ConnectionError: flaky {n}." in str(
            event.attributes["exception.message"]
        )
        assert failed.attributes is not None and failed.attributes["plait.will_retry"] is True
    # a parent fails only if the run did
    run = tree.one("plait.run")
    assert tree.parent(tree.parent(attempts[0])) == run
    assert (
        run.status.status_code is StatusCode.UNSET and tree.parent(attempts[0]).status.status_code is StatusCode.UNSET
    )
    assert run.attributes is not None and run.attributes["plait.status"] == "done"


def test_a_failed_run_marks_its_task_step_and_run_in_error(exporter: InMemorySpanExporter) -> None:
    def boom(state: Any) -> Any:
        raise ValueError("no good")

    g = Graph(S).add_node("a", _say("a")).add_node("boom", boom)
    g = g.add_edge(START, "a").add_edge("a", "boom").add_edge("boom", END)
    with pytest.raises(NodeError):
        g.compile(MemoryCheckpointer(), name="failing").invoke({}, thread_id="f")
    tree = Tree(exporter.get_finished_spans())
    run = tree.one("plait.run")
    task = tree.one("plait.task boom")
    step = tree.parent(task)
    assert tree.parent(step) == run
    assert [s.status.status_code for s in (task, step, run)] == [StatusCode.ERROR] * 3
    assert tree.one("plait.task a").status.status_code is StatusCode.UNSET
    (event,) = [e for e in task.events if e.name == "exception"]
    assert event.attributes is not None and event.attributes["exception.type"] == "plait.errors.NodeError"
    assert "ValueError: no good" in str(event.attributes["exception.message"])  # the node's own error, wrapped
    assert run.attributes is not None and run.attributes["plait.status"] == "failed"
    assert any(e.name == "exception" for e in run.events)


def test_a_subgraph_run_is_under_the_task_that_runs_it(exporter: InMemorySpanExporter) -> None:
    inner = Graph(S).add_node("x", _say("x")).add_node("y", _say("y"))
    inner = inner.add_edge(START, "x").add_edge("x", "y").add_edge("y", END)
    outer = Graph(S).add_node("sub", inner.compile()).add_node("after", _say("after"))
    outer = outer.add_edge(START, "sub").add_edge("sub", "after").add_edge("after", END)
    assert outer.compile(MemoryCheckpointer(), name="outer").invoke({}, thread_id="s")["log"] == ["x", "y", "after"]
    tree = Tree(exporter.get_finished_spans())
    runs = tree.named("plait.run")
    assert len(runs) == 2 and len({r.context.trace_id for r in runs}) == 1
    (top,) = tree.roots()
    sub_task = tree.one("plait.task sub")
    assert tree.parent(tree.parent(sub_task)) == top
    (child,) = tree.children(sub_task, "plait.run")
    assert child.attributes is not None and str(child.attributes["plait.namespace"]).startswith("sub:")
    assert child.attributes["plait.status"] == "done" and "plait.graph.name" not in child.attributes
    child_steps = tree.children(child, "plait.step")
    assert [[t.name for t in tree.children(s)] for s in child_steps] == [["plait.task x"], ["plait.task y"]]
    assert tree.parent(tree.parent(tree.one("plait.task after"))) == top


def test_an_interrupt_is_an_event_and_the_resume_a_new_trace_linked_to_it(exporter: InMemorySpanExporter) -> None:
    def ask(state: Any) -> Any:
        return {"log": [f"answer:{interrupt('ok?')}"]}

    g = Graph(S).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
    app = g.compile(MemoryCheckpointer())
    first = app.invoke({}, thread_id="i")
    assert "__interrupt__" in first
    tree = Tree(exporter.get_finished_spans())
    paused = tree.one("plait.run")
    assert paused.attributes is not None and paused.attributes["plait.status"] == "interrupted"
    assert paused.status.status_code is StatusCode.UNSET
    (pause,) = [e for e in paused.events if e.name == "plait.interrupt"]
    interrupt_id = app.get_state("i").interrupts[0].id
    assert pause.attributes is not None and pause.attributes["plait.interrupt_ids"] == (interrupt_id,)
    task = tree.one("plait.task ask")
    assert [e.name for e in task.events] == ["plait.interrupt"] and task.status.status_code is StatusCode.UNSET
    # the paused checkpoint names the run that paused
    trace_meta = app.get_state("i").metadata["trace"]
    assert trace_meta == {
        "trace_id": format(paused.context.trace_id, "032x"),
        "span_id": format(paused.context.span_id, "016x"),
    }
    exporter.clear()
    assert app.invoke(Command(resume="yes"), thread_id="i")["log"] == ["answer:yes"]
    tree = Tree(exporter.get_finished_spans())
    resumed = tree.one("plait.run")
    assert resumed.parent is None and resumed.context.trace_id != paused.context.trace_id
    (link,) = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (paused.context.trace_id, paused.context.span_id)
    assert [e.name for e in resumed.events if e.name == "plait.resume"] == ["plait.resume"]
    assert resumed.attributes is not None and resumed.attributes["plait.status"] == "done"
    assert tree.one("plait.task ask").attributes["plait.attempt"] == 1  # type: ignore[index]


def test_a_run_given_new_input_links_to_nothing(exporter: InMemorySpanExporter) -> None:
    app = _fan().compile(MemoryCheckpointer())
    app.invoke({}, thread_id="n")
    app.invoke({"log": ["again"]}, thread_id="n")
    runs = Tree(exporter.get_finished_spans()).named("plait.run")
    assert len(runs) == 2 and [len(r.links) for r in runs] == [0, 0]
    assert runs[0].context.trace_id != runs[1].context.trace_id


def test_an_effect_is_a_span_under_its_task_attempt(exporter: InMemorySpanExporter) -> None:
    async def charge(state: Any, ctx: NodeContext) -> Any:
        receipt = await ctx.aonce("charge", lambda: "r-1")
        return {"log": [receipt]}

    def mail(state: Any, ctx: NodeContext) -> Any:
        return {"log": [ctx.once("mail", lambda: "m-1")]}

    g = Graph(S).add_node("charge", charge).add_node("mail", mail)
    g = g.add_edge(START, "charge").add_edge("charge", "mail").add_edge("mail", END)
    assert g.compile(MemoryCheckpointer()).invoke({}, thread_id="o")["log"] == ["r-1", "m-1"]
    tree = Tree(exporter.get_finished_spans())
    effects = tree.named("plait.once")
    assert sorted(str(e.attributes["plait.once"]) for e in effects if e.attributes) == ["charge", "mail"]
    for effect in effects:
        assert effect.attributes is not None
        assert tree.parent(effect).name == f"plait.task {effect.attributes['plait.node']!s}"


def test_a_failed_effect_is_an_error_span(exporter: InMemorySpanExporter) -> None:
    def pay(state: Any, ctx: NodeContext) -> Any:
        def refused() -> str:
            raise RuntimeError("card declined")

        return {"log": [ctx.once("pay", refused)]}

    g = Graph(S).add_node("pay", pay).add_edge(START, "pay").add_edge("pay", END)
    with pytest.raises(NodeError):
        g.compile(MemoryCheckpointer()).invoke({}, thread_id="e")
    tree = Tree(exporter.get_finished_spans())
    effect = tree.one("plait.once")
    assert effect.status.status_code is StatusCode.ERROR
    assert tree.parent(effect) == tree.one("plait.task pay")


def test_a_versioned_graphs_run_names_its_version(exporter: InMemorySpanExporter) -> None:
    g = Graph(S).add_node("a", _say("a")).add_edge(START, "a").add_edge("a", END)
    g.compile(MemoryCheckpointer(), name="v", version=3).invoke({}, thread_id="t")
    _fan().compile(MemoryCheckpointer(), name="plain").invoke({}, thread_id="t")
    versioned, plain = Tree(exporter.get_finished_spans()).named("plait.run")
    assert (versioned.attributes or {})["plait.graph.version"] == 3
    assert "plait.graph.version" not in (plain.attributes or {})
