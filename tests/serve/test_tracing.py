"""A run made over the API joins the caller's trace: its ``plait.run`` span is a child of the
span the request's ``traceparent`` header names, on SQLite (the server runs it) and on
PostgreSQL (a worker of the run queue runs it); a malformed header is ignored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langgraph_sdk.client import SyncLangGraphClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..tracing._kept import kept_spans

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with kept_spans() as (_, out):
        yield out


def _runs(out: InMemorySpanExporter, thread: str) -> list[ReadableSpan]:
    return [
        s
        for s in out.get_finished_spans()
        if s.name == "plait.run" and (s.attributes or {}).get("plait.thread_id") == thread
    ]


def test_a_run_continues_the_trace_of_the_requests_traceparent(
    client: SyncLangGraphClient, spans: InMemorySpanExporter
) -> None:
    thread = client.threads.create()["thread_id"]
    headers = {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": "vendor=1"}
    client.runs.wait(thread, "steps", input={}, headers=headers)
    (run,) = _runs(spans, thread)
    assert format(run.context.trace_id, "032x") == TRACE
    assert run.parent is not None and format(run.parent.span_id, "016x") == SPAN and run.parent.is_remote
    tasks = [s for s in spans.get_finished_spans() if s.name.startswith("plait.task")]
    assert tasks and {format(s.context.trace_id, "032x") for s in tasks} == {TRACE}


def test_a_malformed_traceparent_is_ignored(client: SyncLangGraphClient, spans: InMemorySpanExporter) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "steps", input={}, headers={"traceparent": "not-a-trace"})
    (run,) = _runs(spans, thread)
    assert run.parent is None  # a trace of its own, and the run was not refused
