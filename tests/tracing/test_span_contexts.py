"""Runs that share an event loop, streamed runs and breakpoints: each run keeps its own tree,
and the context OpenTelemetry keeps is left as it was found."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any, TypedDict

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plait import END, START, AppendList, Graph, MemoryCheckpointer

from ._tree import Tree


class S(TypedDict):
    log: Annotated[list[str], AppendList]


def _two_steps(gate: asyncio.Event | None = None, arrived: list[int] | None = None) -> Graph:
    async def first(state: Any) -> Any:
        if gate is not None and arrived is not None:
            arrived.append(1)
            if len(arrived) == 2:
                gate.set()
            await gate.wait()  # both runs are inside this task at once
        return {"log": ["first"]}

    async def second(state: Any) -> Any:
        return {"log": ["second"]}

    g = Graph(S).add_node("first", first).add_node("second", second)
    return g.add_edge(START, "first").add_edge("first", "second").add_edge("second", END)


def test_two_runs_on_one_loop_make_two_separate_trees(
    exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    arrived: list[int] = []

    async def main() -> None:
        app = _two_steps(asyncio.Event(), arrived).compile(MemoryCheckpointer())
        await asyncio.gather(app.ainvoke({}, thread_id="c1"), app.ainvoke({}, thread_id="c2"))
        assert not trace.get_current_span().get_span_context().is_valid  # nothing left attached

    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        asyncio.run(main())
    assert len(arrived) == 2 and not caplog.records  # no "Failed to detach context"
    tree = Tree(exporter.get_finished_spans())
    runs = tree.named("plait.run")
    assert len(runs) == 2 and len({r.context.trace_id for r in runs}) == 2
    for run in runs:
        thread = run.attributes["plait.thread_id"] if run.attributes else None
        tasks = [t for s in tree.children(run, "plait.step") for t in tree.children(s)]
        assert [t.name for t in tasks] == ["plait.task first", "plait.task second"]
        assert {t.attributes["plait.thread_id"] for t in tasks if t.attributes} == {thread}
        assert {t.context.trace_id for t in tasks} == {run.context.trace_id}


def test_a_streamed_run_has_the_same_tree(exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    app = _two_steps().compile(MemoryCheckpointer())
    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        items = list(app.stream({}, thread_id="st", mode="updates"))
    assert items == [{"first": {"log": ["first"]}}, {"second": {"log": ["second"]}}]
    assert not caplog.records
    tree = Tree(exporter.get_finished_spans())
    run = tree.one("plait.run")
    assert run.attributes is not None and run.attributes["plait.status"] == "done"
    steps = tree.children(run, "plait.step")
    assert [[t.name for t in tree.children(s)] for s in steps] == [["plait.task first"], ["plait.task second"]]


def test_a_run_past_a_breakpoint_links_to_the_run_that_stopped_there(exporter: InMemorySpanExporter) -> None:
    app = _two_steps().compile(MemoryCheckpointer(), interrupt_before=["second"])
    app.invoke({}, thread_id="b")
    paused = Tree(exporter.get_finished_spans()).one("plait.run")
    assert paused.attributes is not None and paused.attributes["plait.status"] == "interrupted"
    (event,) = [e for e in paused.events if e.name == "plait.interrupt"]
    assert event.attributes is not None and event.attributes["plait.breakpoint"] is True
    exporter.clear()
    assert app.invoke(None, thread_id="b")["log"] == ["first", "second"]
    tree = Tree(exporter.get_finished_spans())
    resumed = tree.one("plait.run")
    (link,) = resumed.links
    assert link.context.span_id == paused.context.span_id
    steps = tree.children(resumed, "plait.step")
    assert [[t.name for t in tree.children(s)] for s in steps] == [["plait.task second"]]


def test_a_run_nests_under_the_callers_span(exporter: InMemorySpanExporter) -> None:
    app = _two_steps().compile(MemoryCheckpointer())
    tracer = trace.get_tracer("caller", tracer_provider=exporter_provider(exporter))
    with tracer.start_as_current_span("request") as request:
        app.invoke({}, thread_id="n")
    tree = Tree(exporter.get_finished_spans())
    run = tree.one("plait.run")
    assert run.parent is not None and run.parent.span_id == request.get_span_context().span_id


def exporter_provider(exporter: InMemorySpanExporter) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider
