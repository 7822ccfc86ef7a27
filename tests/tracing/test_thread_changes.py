"""The changes to a thread made outside a run (``update_state``, ``fork``) are spans of their
own; a run says on its span which lease it holds the thread by, and whether it replays an
old checkpoint or branches from it; a run that lost its lease says so before it fails."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plait import END, START, AppendList, Graph, LeaseLostError, MemoryCheckpointer

from ._tree import Tree


class S(TypedDict):
    log: Annotated[list[str], AppendList]


def _app(node: Any = None) -> Any:
    g = Graph(S).add_node("a", node or (lambda s: {"log": ["a"]})).add_edge(START, "a").add_edge("a", END)
    return g.compile(MemoryCheckpointer(), name="g")


def _events(span: Any) -> dict[str, dict[str, Any]]:
    return {e.name: dict(e.attributes or {}) for e in span.events}


def test_update_state_and_fork_are_spans_naming_what_they_made(exporter: InMemorySpanExporter) -> None:
    app = _app()
    app.invoke({"log": ["x"]}, thread_id="t")
    exporter.clear()
    made = app.update_state("t", {"log": ["edited"]}, as_node="a")
    forked = app.fork("t", "t2", edits={"log": ["more"]})
    tree = Tree(exporter.get_finished_spans())
    update, fork = tree.one("plait.update"), tree.one("plait.fork")
    assert dict(update.attributes or {}) == {
        "plait.thread_id": "t",
        "plait.namespace": "",
        "plait.as_node": "a",
        "plait.checkpoint_id": made,
    }
    assert (fork.attributes or {})["plait.source"] == "t" and (fork.attributes or {})["plait.checkpoint_id"] == forked
    assert tree.roots() == [update, fork]  # each a trace of its own (no run around them)


def test_a_refused_update_is_an_error_span(exporter: InMemorySpanExporter) -> None:
    app = _app()
    with pytest.raises(Exception, match="nope"):
        app.update_state("t", {"nope": 1})
    (span,) = exporter.get_finished_spans()
    assert (
        span.name == "plait.update" and not span.status.is_ok and "plait.checkpoint_id" not in (span.attributes or {})
    )


def test_a_run_names_its_lease_and_says_when_it_replays_or_branches(exporter: InMemorySpanExporter) -> None:
    app = _app()
    app.invoke({"log": ["x"]}, thread_id="t")
    first = app.get_state_history("t")[-1].checkpoint_id  # the input's checkpoint
    app.invoke(None, thread_id="t", checkpoint_id=first)
    app.invoke({"log": ["y"]}, thread_id="t", checkpoint_id=first)
    plain, replay, branch = Tree(exporter.get_finished_spans()).named("plait.run")
    lease = _events(plain)["plait.lease"]
    assert lease["plait.lease.token"] >= 1 and str(lease["plait.lease.owner"])
    assert "plait.replay" not in _events(plain) and "plait.branch" not in _events(plain)
    assert _events(replay)["plait.replay"] == {"plait.checkpoint_id": first}
    assert _events(branch)["plait.branch"] == {"plait.checkpoint_id": first}
    assert _events(branch)["plait.lease"]["plait.lease.token"] > lease["plait.lease.token"]


def test_a_run_that_lost_its_lease_says_so_on_its_span(exporter: InMemorySpanExporter) -> None:
    def lose(state: Any) -> Any:
        raise LeaseLostError("t", 1, taken_by="another-owner")

    with pytest.raises(LeaseLostError):
        _app(lose).invoke({"log": []}, thread_id="t")
    run = Tree(exporter.get_finished_spans()).one("plait.run")
    assert _events(run)["plait.lease_lost"] == {"plait.taken_by": "another-owner"}
    assert not run.status.is_ok
