"""A store with a traced thread and one that is not: what the trace id tests read back."""

from __future__ import annotations

from typing import Any

from plait import Command, SqliteCheckpointer

from ._studio_support import compiled

JAEGER = "http://localhost:16686/trace/{trace_id}?span={span_id}"


def seed_traced(db: str) -> dict[str, Any]:
    """Thread ``traced`` paused on its interrupt and resumed, both runs traced (two traces), and
    thread ``plain`` run untraced. Returns the two ``plait.run`` spans' ids: ``{"paused":
    (trace_id, span_id), "resumed": (...)}``."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import plait

    saver = SqliteCheckpointer(db)
    app = compiled(saver)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    plait.instrument(tracer_provider=provider)
    try:
        app.invoke({"topic": "rivers"}, thread_id="traced")
        app.invoke(Command(resume="yes"), thread_id="traced")
    finally:
        plait.uninstrument()
        provider.shutdown()
    app.invoke({"topic": "lakes"}, thread_id="plain")
    app.invoke(Command(resume="yes"), thread_id="plain")
    saver.close()
    runs = [s for s in spans.get_finished_spans() if s.name == "plait.run"]
    assert len(runs) == 2
    ids = [(format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")) for s in runs]
    return {"paused": ids[0], "resumed": ids[1]}
