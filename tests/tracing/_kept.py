"""plait instrumented with a provider that keeps the spans in memory: what the tracing tests
of every package share (no network)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import plait


@contextlib.contextmanager
def kept_spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """The provider and the spans of the runs made inside; plait uninstrumented after."""
    out = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(out))
    plait.instrument(tracer_provider=provider)
    try:
        yield provider, out
    finally:
        plait.uninstrument()
        provider.shutdown()
