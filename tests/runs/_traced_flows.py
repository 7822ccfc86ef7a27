"""A graph for the worker tracing tests (not a test module), loaded by `plait worker` as
``<this file>:steps``. Loading it in a process whose environment names ``PLAIT_TEST_SPANS``
instruments plait there with a provider that appends each span to that file as it ends (a
JSON line: ids, parent, links, attributes): what a worker that is later SIGKILLed exported.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from plait import START, AppendList, Graph, LastWriteWins, StateSchema

FILE = str(Path(__file__).resolve())


def name(graph: str) -> str:
    return f"{FILE}:{graph}"


def _instrument(path: str) -> None:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import plait

    class LineExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            for span in spans:
                line = {
                    "name": span.name,
                    "trace_id": format(span.context.trace_id, "032x"),
                    "span_id": format(span.context.span_id, "016x"),
                    "parent": format(span.parent.span_id, "016x") if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                }
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, orjson.dumps(line) + b"\n")
                finally:
                    os.close(fd)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LineExporter()))
    plait.instrument(tracer_provider=provider)


if os.environ.get("PLAIT_TEST_SPANS"):
    _instrument(os.environ["PLAIT_TEST_SPANS"])


schema = StateSchema.builder().add("log", AppendList()).add("steps", LastWriteWins(), default=1).build()


async def step(state: Any) -> dict[str, Any]:
    i = len(state["log"])
    ledger = os.environ.get("PLAIT_TEST_LEDGER")
    if ledger:
        with open(ledger, "a") as out:
            out.write(f"{i}:{os.getpid()}\n")
    gate = os.environ.get("PLAIT_TEST_GATE")
    while gate and i >= 3 and not os.path.exists(gate):  # held from the fourth step on, until the test opens it
        await asyncio.sleep(0.01)
    return {"log": [i]}


def _again(state: Any) -> str:
    return "step" if len(state["log"]) < state["steps"] else "__end__"


steps = Graph(schema)
steps.add_node("step", step)
steps.add_edge(START, "step")
steps.add_conditional_edges("step", _again)
