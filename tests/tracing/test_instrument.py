"""Turning tracing on and off: nothing is made while off, one instrumentation at a time, and
a program that never traces never loads OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any, TypedDict

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import plait
from plait import END, START, Graph, MemoryCheckpointer
from plait.tracing import is_instrumented

from ._tree import Tree


class S(TypedDict):
    n: int


def _app() -> Any:
    def inc(state: Any) -> Any:
        return {"n": state["n"] + 1}

    return Graph(S).add_node("inc", inc).add_edge(START, "inc").add_edge("inc", END).compile(MemoryCheckpointer())


def test_nothing_is_traced_when_not_instrumented(quiet: InMemorySpanExporter) -> None:
    app = _app()
    assert app.invoke({"n": 1}, thread_id="q")["n"] == 2
    assert quiet.get_finished_spans() == ()
    assert not is_instrumented()
    assert all("trace" not in c.metadata for c in app.get_state_history("q"))


def test_nothing_is_traced_after_uninstrument(exporter: InMemorySpanExporter) -> None:
    app = _app()
    app.invoke({"n": 1}, thread_id="u")
    assert len(Tree(exporter.get_finished_spans()).named("plait.run")) == 1
    plait.uninstrument()
    plait.uninstrument()  # (a second call does nothing)
    assert not is_instrumented()
    exporter.clear()
    app.invoke({"n": 1}, thread_id="u2")
    assert exporter.get_finished_spans() == ()
    assert "trace" not in app.get_state("u2").metadata


def test_instrument_twice_is_one_instrumentation(exporter: InMemorySpanExporter) -> None:
    other = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(other))
    plait.instrument(tracer_provider=provider)  # the second call: its provider, still one of each span
    _app().invoke({"n": 1}, thread_id="twice")
    assert exporter.get_finished_spans() == ()
    tree = Tree(other.get_finished_spans())
    assert len(tree.named("plait.run")) == 1 and len(tree.named("plait.task inc")) == 1
    plait.uninstrument()
    assert not is_instrumented()


_GLOBAL_PROVIDER = textwrap.dedent(
    """
        from typing import TypedDict
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import plait

        class S(TypedDict):
            n: int

        out = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(out))
        trace.set_tracer_provider(provider)
    """
)
"""A child interpreter's start: its global tracer provider keeps the spans in ``out``."""


def test_the_global_provider_is_used_by_default() -> None:
    """In a child interpreter: ``instrument()`` with no provider sends to the one set with
    ``opentelemetry.trace.set_tracer_provider``."""
    code = _GLOBAL_PROVIDER + textwrap.dedent(
        """
        plait.instrument()
        g = plait.Graph(S).add_node("a", lambda s: {"n": 1}).add_edge(plait.START, "a").add_edge("a", plait.END)
        g.compile().invoke({"n": 0})
        print(sorted(s.name for s in out.get_finished_spans()))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['plait.run', 'plait.step', 'plait.task a']"


def test_a_graph_compiled_with_tracing_is_traced_without_instrument() -> None:
    """In a child interpreter (the global provider can be set once): only the graph compiled
    with ``tracing=True`` makes spans, its effects and subgraph runs included."""
    code = _GLOBAL_PROVIDER + textwrap.dedent(
        """

        def effect(s, ctx):
            return {"n": ctx.once("e", lambda: 1)}

        def build(**kw):
            g = plait.Graph(S).add_node("a", effect).add_edge(plait.START, "a").add_edge("a", plait.END)
            return g.compile(plait.MemoryCheckpointer(), **kw)

        build().invoke({"n": 0}, thread_id="plain")
        assert out.get_finished_spans() == ()
        inner = plait.Graph(S).add_node("b", lambda s: {"n": 2}).add_edge(plait.START, "b").add_edge("b", plait.END)
        outer = plait.Graph(S).add_node("a", effect).add_node("sub", inner.compile())
        outer.add_edge(plait.START, "a").add_edge("a", "sub").add_edge("sub", plait.END)
        outer.compile(plait.MemoryCheckpointer(), tracing=True).invoke({"n": 0}, thread_id="traced")
        assert not plait.tracing.is_instrumented()
        print(sorted(s.name for s in out.get_finished_spans()))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names = ["plait.once", "plait.run", "plait.run", "plait.step", "plait.step", "plait.step"]
    names += ["plait.task a", "plait.task b", "plait.task sub"]
    assert done.stdout.strip() == repr(names)


def test_import_plait_loads_no_opentelemetry_and_instrument_says_what_to_install() -> None:
    code = textwrap.dedent(
        """
        import sys
        import plait
        assert not [m for m in sys.modules if m.startswith("opentelemetry")], "imported"
        sys.modules["opentelemetry"] = None  # as if it were not installed
        try:
            plait.instrument()
        except plait.PlaitError as exc:
            assert isinstance(exc, ImportError), type(exc)
            print(type(exc).__name__, exc)
        from typing import TypedDict

        class S(TypedDict):
            n: int

        g = plait.Graph(S).add_node("a", lambda s: None).add_edge(plait.START, "a")
        try:
            g.compile(tracing=True)
        except plait.PlaitError as exc:
            print(type(exc).__name__)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("TracingUnavailableError ")
    assert "pip install 'plait[otel]'" in done.stdout
    assert done.stdout.splitlines()[-1] == "TracingUnavailableError"
