"""Draw docs/img/trace.svg: the real spans of the tutorial's agent (examples/agent.py), one
run pausing for the human's approval and the run that resumes it, as a waterfall.

Run it after changing the spans plait makes: ``python docs/render_trace.py`` (it needs
``opentelemetry-sdk``, in the dev extra; no network). The agent runs in memory with its
scripted model; its spans go to an ``InMemorySpanExporter`` through a ``SimpleSpanProcessor``,
and are drawn here as SVG text, with no plotting library: one row per span, indented under its
parent, its bar where it started and ended, its name and duration, a failed span red, its
events as ticks. Each invocation is a trace of its own; the second's ``plait.run`` span links
to the first's (docs/tracing.md, "A resume links to the run that paused"), which the picture
notes under its title.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import sys
import tempfile
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any
from xml.sax.saxutils import escape

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = pathlib.Path(__file__).with_name("img") / "trace.svg"

WIDTH = 980
LABELS = 330  # the span names' column
BAR_X, BAR_W = 340, 520  # the bars' area
ROW = 19
FONT = "font-family='system-ui, -apple-system, Segoe UI, sans-serif' font-size='12'"
COLORS = {
    "plait.run": "#3d5a98",
    "plait.step": "#8796b3",
    "plait.task": "#3b8c55",
    "plait.once": "#b07800",
    "chat": "#6a4fb3",
}
ERROR = "#c62828"
TICKS = {
    "plait.lease": "#2b7a99",
    "plait.interrupt": "#e08a00",
    "plait.checkpoint": "#1d1d1b",
    "plait.resume": "#7a2e8a",
    "exception": ERROR,
}
TITLES = ("the run that pauses for approval", "the run that resumes it, once approved")


def _agent() -> ModuleType:
    """examples/agent.py as a module (its ``main`` not run), with its scripted model beside it."""
    folder = ROOT / "examples"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("plait_tutorial_agent", folder / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _scratch() -> Iterator[None]:
    """The agent's "mail server" writes outbox.json in the current folder: a scratch one."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="plait-trace-") as folder:
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(here)


def collect() -> list[Any]:
    """The finished spans (``ReadableSpan``) of the agent asking to email and, once a human
    says yes, sending it: two invocations, two traces."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import plait

    agent = _agent()
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    ask = "What's the weather in Oslo? Then email ann@example.com saying bring a coat"
    plait.instrument(tracer_provider=provider)
    try:
        with _scratch(), agent.graph.compile(checkpointer=plait.MemoryCheckpointer(), name="agent") as app:
            out = app.invoke({"messages": [{"role": "user", "content": ask}]}, thread_id="ann")
            assert out["__interrupt__"], "the agent should pause for approval"
            out = app.invoke(plait.Command(resume="yes"), thread_id="ann")
            assert app.get_state("ann").status == "idle", out
    finally:
        plait.uninstrument()
        provider.shutdown()
    return list(spans.get_finished_spans())


# -- the picture -------------------------------------------------------------------------------


def _label(span: Any) -> str:
    attrs = span.attributes or {}
    if span.name == "plait.step":
        return f"plait.step {attrs.get('plait.step', '')}"
    if span.name == "plait.once":
        return f"plait.once {attrs.get('plait.once', '')}"
    if span.name.startswith("plait.task") and attrs.get("plait.attempt", 1) != 1:
        return f"{span.name} (attempt {attrs['plait.attempt']})"
    return str(span.name)


def _took(ns: int) -> str:
    if ns < 1_000_000:
        return f"{ns / 1000:.0f} µs"
    return f"{ns / 1e6:.1f} ms" if ns < 1e9 else f"{ns / 1e9:.2f} s"


def _color(span: Any) -> str:
    from opentelemetry.trace import StatusCode

    if span.status.status_code is StatusCode.ERROR:
        return ERROR
    return COLORS.get(str(span.name).split(" ")[0], "#666666")


def _rows(spans: Sequence[Any]) -> list[tuple[Any, int]]:
    """The spans of one trace, each under its parent (depth first, by start time)."""
    ids = {s.context.span_id for s in spans}
    children: dict[int | None, list[Any]] = {}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)
    out: list[tuple[Any, int]] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: (s.start_time, s.name)):
            out.append((s, depth))
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return out


def _traces(spans: Sequence[Any]) -> list[list[Any]]:
    """The traces, in the order they began."""
    by: dict[int, list[Any]] = {}
    for s in spans:
        by.setdefault(s.context.trace_id, []).append(s)
    return sorted(by.values(), key=lambda t: min(s.start_time for s in t))


def _text(x: float, y: float, text: str, extra: str = "") -> str:
    return f"<text x='{x:.1f}' y='{y:.1f}' {FONT}{' ' + extra if extra else ''}>{escape(text)}</text>"


def render(spans: Sequence[Any]) -> str:
    """The waterfall of ``spans`` as an SVG document: one block per trace."""
    traces = _traces(spans)
    parts: list[str] = []
    y = 16.0
    for n, trace in enumerate(traces):
        rows = _rows(trace)
        start = min(s.start_time for s in trace)
        total = max(s.end_time for s in trace) - start or 1
        scale = BAR_W / total
        title = TITLES[n] if len(traces) == len(TITLES) else "a run"
        head = f"trace {n + 1} of {len(traces)}: {title}"
        parts.append(_text(8, y + 12, head, "font-weight='700' fill='#1d1d1b'"))
        parts.append(_text(WIDTH - 8, y + 12, f"trace id {format(trace[0].context.trace_id, '032x')}", _MUTED_END))
        y += 18
        for run in (s for s in trace if s.name == "plait.run" and s.links):
            for link in run.links:
                linked = [i for i, t in enumerate(traces) if t[0].context.trace_id == link.context.trace_id]
                to = f"trace {linked[0] + 1}'s plait.run" if linked else "a span of another trace"
                why = (link.attributes or {}).get("plait.link", "")
                parts.append(_text(8, y + 11, f"↳ its plait.run links to {to} ({why})", "fill='#7a2e8a'"))
                y += 16
        y += 18
        for k in range(5):  # the time axis: 0, a quarter, ... the whole trace
            x = BAR_X + BAR_W * k / 4
            parts.append(
                f"<line x1='{x:.1f}' y1='{y:.1f}' x2='{x:.1f}' y2='{y + ROW * len(rows) + 4:.1f}' stroke='#e4e2dc'/>"
            )
            anchor = "middle" if 0 < k < 4 else ("start" if k == 0 else "end")
            parts.append(
                _text(x, y - 1, _took(round(total * k / 4)) if k else "0", f"fill='#6b6b66' text-anchor='{anchor}'")
            )
        y += 4
        for i, (span, depth) in enumerate(rows):
            top = y + i * ROW
            if i % 2:
                parts.append(f"<rect x='0' y='{top:.1f}' width='{WIDTH}' height='{ROW}' fill='#f6f5f1'/>")
            parts.append(_text(8 + 14 * depth, top + 13.5, _label(span), "fill='#1d1d1b'"))
            x = BAR_X + (span.start_time - start) * scale
            w = max(1.5, (span.end_time - span.start_time) * scale)
            color = _color(span)
            parts.append(
                f"<rect x='{x:.1f}' y='{top + 4:.1f}' width='{w:.1f}' height='{ROW - 8}' rx='2' fill='{color}'>"
                f"<title>{escape(_label(span))}: {_took(span.end_time - span.start_time)}</title></rect>"
            )
            for event in span.events:
                ex = BAR_X + (event.timestamp - start) * scale
                tick = TICKS.get(event.name, "#444444")
                parts.append(
                    f"<line x1='{ex:.1f}' y1='{top + 1:.1f}' x2='{ex:.1f}' y2='{top + ROW - 1:.1f}' stroke='{tick}' "
                    f"stroke-width='2'><title>{escape(event.name)}</title></line>"
                )
            took = _took(span.end_time - span.start_time)
            fill = ERROR if color == ERROR else "#1d1d1b"
            parts.append(_text(WIDTH - 8, top + 13.5, took, f"fill='{fill}' text-anchor='end'"))
        y += ROW * len(rows) + 22
    y = _legend(parts, y)
    body = "\n".join(parts)
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{y:.0f}' viewBox='0 0 {WIDTH} {y:.0f}' "
        f"role='img' aria-label='The spans of the tutorial agent, a run paused for approval and its resume'>\n"
        f"<rect width='100%' height='100%' fill='#ffffff'/>\n{body}\n</svg>\n"
    )


_MUTED_END = "fill='#6b6b66' text-anchor='end'"


def _legend(parts: list[str], y: float) -> float:
    """Two lines: what each bar's color is, then what each tick is."""
    x = 8.0
    for name, color in [*COLORS.items(), ("failed (status ERROR)", ERROR)]:
        parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='12' height='10' rx='2' fill='{color}'/>")
        parts.append(_text(x + 16, y + 9.5, name, "fill='#1d1d1b'"))
        x += 30 + 7 * len(name)
    x, y = 8.0, y + 20
    for name, color in TICKS.items():
        line = f"x1='{x + 5:.1f}' y1='{y - 1:.1f}' x2='{x + 5:.1f}' y2='{y + 11:.1f}'"
        parts.append(f"<line {line} stroke='{color}' stroke-width='2'/>")
        parts.append(_text(x + 16, y + 9.5, f"{name} event", "fill='#1d1d1b'"))
        x += 60 + 7 * len(name)
    return y + 22


def main() -> None:
    OUT.write_text(render(collect()), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
