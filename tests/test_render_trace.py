"""docs/render_trace.py runs the tutorial's agent traced and draws its spans: a valid SVG
naming every span of both traces (the pause and the resume), a failed span red."""

from __future__ import annotations

import importlib.util
import pathlib
import xml.etree.ElementTree as ET
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the traced runs need opentelemetry-sdk (the dev extra)")

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "docs" / "render_trace.py"
SVG = "{http://www.w3.org/2000/svg}"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_trace", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and float(root.attrib["height"]) > 100
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def test_the_agents_trace_is_drawn_with_every_span() -> None:
    script = _script()
    spans = script.collect()
    assert len({s.context.trace_id for s in spans}) == 2  # the pause and the resume
    svg = script.render(spans)
    texts = _texts(svg)
    for name in ("plait.run", "plait.step 0", "plait.task agent", "plait.task review", "plait.task tools"):
        assert name in texts, name
    assert texts.count("plait.run") == 3  # a row in each trace, and the legend
    assert sum(t.startswith("plait.once ") for t in texts) == 2  # the two tool calls of the resumed run
    assert "↳ its plait.run links to trace 1's plait.run (resumes)" in texts
    assert "trace 1 of 2: the run that pauses for approval" in texts
    bars = [r for r in ET.fromstring(svg).iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == len(spans) and script.ERROR not in {b.attrib["fill"] for b in bars}  # nothing failed


def test_a_failed_attempt_is_red() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import plait
    from plait import END, START, Graph, RetryPolicy, StateSchema

    calls: list[int] = []

    def flaky(state: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("try again")
        return {"n": 1}

    g = Graph(StateSchema.builder().add_lww("n").build())
    g.add_node("fetch", flaky, retry=RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=0))
    g.add_edge(START, "fetch").add_edge("fetch", END)
    out = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(out))
    plait.instrument(tracer_provider=provider)
    try:
        g.compile().invoke({})
    finally:
        plait.uninstrument()
        provider.shutdown()
    script = _script()
    svg = script.render(out.get_finished_spans())
    assert "plait.task fetch (attempt 2)" in _texts(svg)
    red = [r for r in ET.fromstring(svg).iter(f"{SVG}rect") if r.attrib.get("fill") == script.ERROR]
    assert len(red) == 2  # the failed attempt's bar, and the legend's swatch
    assert "exception" in {(t.text or "") for t in ET.fromstring(svg).iter(f"{SVG}title")}
