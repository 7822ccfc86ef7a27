"""Every test here instruments plait with a provider of its own that keeps the spans in
memory (no network), and leaves plait uninstrumented."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import plait

from ._kept import kept_spans


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The spans of the runs of the test, plait instrumented with their provider."""
    with kept_spans() as (_, out):
        yield out


@pytest.fixture
def quiet() -> Iterator[InMemorySpanExporter]:
    """A provider that would keep spans, plait not instrumented."""
    out = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(out))
    plait.uninstrument()
    yield out
    provider.shutdown()
