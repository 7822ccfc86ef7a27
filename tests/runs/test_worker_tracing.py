"""A queued run's trace: the submitter's span context is stored with the run, the worker's
``plait.run`` of each attempt is its child, and a later attempt links to the earlier one's
span, whose ids the run row kept even though the worker was SIGKILLed before exporting it."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plait.errors import TraceContextError
from plait.runs import Runs

from ..tracing._kept import kept_spans
from . import _run_flows as flows
from . import _traced_flows as traced
from ._runs_support import WorkerProcess, ledger_lines, started, wait_for, worker_in_process

pytestmark = pytest.mark.postgres

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """plait instrumented in this process, its spans kept in memory."""
    with kept_spans() as kept:
        yield kept


def _hex(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def _run_span(spans: tuple[ReadableSpan, ...], thread: str) -> ReadableSpan:
    (found,) = [s for s in spans if s.name == "plait.run" and (s.attributes or {}).get("plait.thread_id") == thread]
    return found


def test_a_worker_run_is_a_child_of_the_span_it_was_submitted_in(
    runs_db: tuple[str, str], provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    dsn, schema = runs_db
    made, out = provider
    client = made.get_tracer("client")

    async def go() -> tuple[str, str]:
        async with Runs(dsn, schema=schema) as runs, worker_in_process(dsn, schema, [flows.name("single")]):
            with client.start_as_current_span("request") as span:
                run_id = await runs.asubmit(flows.name("single"), {}, thread_id="traced")
            stored = (await runs.aget(run_id)).options["trace"]
            assert (await runs.ajoin(run_id, timeout=30)).status == "success"
            return stored["traceparent"], _hex(span.get_span_context().span_id, 16)

    traceparent, request = asyncio.run(go())
    run = _run_span(out.get_finished_spans(), "traced")
    assert run.parent is not None and _hex(run.parent.span_id, 16) == request
    assert traceparent.split("-")[1] == _hex(run.context.trace_id, 32)
    assert run.attributes is not None and run.attributes["plait.attempt"] == 1
    assert run.attributes["plait.queued_run_id"]
    assert not run.links  # a first attempt links to nothing
    tasks = [s for s in out.get_finished_spans() if s.name == "plait.task one"]
    assert [s.context.trace_id for s in tasks] == [run.context.trace_id]


def test_the_sync_submit_stores_the_callers_span_not_its_loops(
    runs_db: tuple[str, str], provider: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    dsn, schema = runs_db
    made, _ = provider
    with Runs(dsn, schema=schema) as runs:
        with made.get_tracer("client").start_as_current_span("request") as span:
            inside = runs.submit(flows.name("single"), {}, thread_id="sync")
        outside = runs.submit(flows.name("single"), {}, thread_id="sync-2")
        stored = runs.get(inside).options["trace"]["traceparent"]
        assert stored.split("-")[2] == _hex(span.get_span_context().span_id, 16)
        assert "trace" not in (runs.get(outside).options or {})  # no span active: nothing stored
        given = runs.submit(flows.name("single"), {}, thread_id="given", trace_context={"traceparent": PARENT})
        assert runs.get(given).options["trace"] == {"traceparent": PARENT}
        with pytest.raises(TraceContextError, match="trace_context is not a W3C trace context"):
            runs.submit(flows.name("single"), {}, thread_id="bad", trace_context={"traceparent": "nope"})


def test_a_worker_that_does_not_trace_ignores_the_stored_context(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs, worker_in_process(dsn, schema, [flows.name("single")]):
            run_id = await runs.asubmit(flows.name("single"), {}, thread_id="t", trace_context={"traceparent": PARENT})
            assert (await runs.ajoin(run_id, timeout=30)).status == "success"

    asyncio.run(go())
    with psycopg.connect(dsn) as conn:
        (span,) = conn.execute(f'SELECT span FROM "{schema}".plait_run').fetchone() or (None,)
    assert span is None  # nothing traced: no span recorded


def test_plait_submit_takes_the_context_from_traceparent(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    args = [sys.executable, "-m", "plait", "submit", flows.name("single"), "--db", dsn, "--schema", schema, "--json"]

    def submit(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)

    done = submit(TRACEPARENT=PARENT, TRACESTATE="vendor=1")
    assert done.returncode == 0, done.stderr
    run_id = orjson.loads(done.stdout)["run_id"]
    with Runs(dsn, schema=schema) as runs:
        assert runs.get(run_id).options["trace"] == {"traceparent": PARENT, "tracestate": "vendor=1"}
    bad = submit(TRACEPARENT="00-xyz")
    assert bad.returncode == 2
    assert "TRACEPARENT is not a W3C trace context: '00-xyz'" in bad.stderr


@pytest.mark.slow
def test_after_a_sigkill_the_next_attempt_links_to_the_dead_attempts_span(
    runs_db: tuple[str, str],
    provider: tuple[TracerProvider, InMemorySpanExporter],
    workers: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    dsn, schema = runs_db
    made, out = provider
    ledger, gate, spans = tmp_path / "ledger", tmp_path / "gate", tmp_path / "spans"
    env = {"PLAIT_TEST_LEDGER": str(ledger), "PLAIT_TEST_GATE": str(gate), "PLAIT_TEST_SPANS": str(spans)}
    first = workers(env=env, args=("--graph", traced.name("steps")))
    with Runs(dsn, schema=schema) as runs:
        with made.get_tracer("client").start_as_current_span("request") as request:
            run_id = runs.submit(traced.name("steps"), {"steps": 6}, thread_id="killed")
    wait_for(functools.partial(started, first.log), 30, "the worker to start")
    wait_for(lambda: len(ledger_lines(ledger)) >= 4, 30, "the fourth step to start (it waits at the gate)")
    first.kill()
    first.wait(10)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f'SELECT span, attempts FROM "{schema}".plait_run WHERE run_id = %s', (run_id,)).fetchone()
    assert row is not None and row[1] == 1
    trace_id, _, dead_run = str(row[0]).partition("-")
    # what the killed worker exported: its finished steps, under the run span it never ended
    exported = [orjson.loads(line) for line in spans.read_text().splitlines()]
    steps = [s for s in exported if s["name"] == "plait.step"]
    assert len(steps) >= 3 and {s["parent"] for s in steps} == {dead_run}
    assert {s["trace_id"] for s in exported} == {trace_id} == {_hex(request.get_span_context().trace_id, 32)}
    assert not [s for s in exported if s["name"] == "plait.run"]
    with Runs(dsn, schema=schema) as runs:
        assert runs.get(run_id).trace == {"trace_id": trace_id, "span_id": dead_run}
    gate.touch()

    async def resume() -> str:
        async with Runs(dsn, schema=schema) as runs, worker_in_process(dsn, schema, [traced.name("steps")]):
            return (await runs.ajoin(run_id, timeout=60)).status

    assert asyncio.run(resume()) == "success"
    again = _run_span(out.get_finished_spans(), "killed")
    assert again.parent is not None and again.parent.span_id == request.get_span_context().span_id
    assert _hex(again.context.trace_id, 32) == trace_id
    assert again.attributes is not None and again.attributes["plait.attempt"] == 2
    (link,) = again.links
    assert _hex(link.context.span_id, 16) == dead_run and _hex(link.context.trace_id, 32) == trace_id
    assert link.attributes is not None and link.attributes["plait.link"] == "retries"
    with psycopg.connect(dsn) as conn:
        (now,) = conn.execute(f'SELECT span FROM "{schema}".plait_run WHERE run_id = %s', (run_id,)).fetchone() or ("",)
    assert now == f"{trace_id}-{_hex(again.context.span_id, 16)}"  # the next attempt would link to this one
