"""OpenTelemetry traces of plait's runs: :func:`instrument` turns them on, :func:`uninstrument`
off (see docs/tracing.md for the spans and their attributes).

Importing this package does not import OpenTelemetry; :func:`instrument` does, so that a
program that never traces never loads it.
"""

from __future__ import annotations

from typing import Any

from plait.errors import TracingUnavailableError
from plait.tracing import hooks
from plait.tracing.hooks import graph_tracer

__all__ = ["graph_tracer", "instrument", "is_instrumented", "require_opentelemetry", "uninstrument"]


def instrument(tracer_provider: Any = None) -> None:
    """Trace every run of this process from now on: a ``plait.run`` span per invocation, a
    ``plait.step`` span per super-step under it, a ``plait.task <node>`` span per task
    attempt, a ``plait.once`` span per effect; plait's log records carry the ids of the
    span they were logged in (``otelTraceID``, ``otelSpanID``).

    ``tracer_provider`` is an OpenTelemetry ``TracerProvider`` (None: the global one, as set
    by ``opentelemetry.trace.set_tracer_provider``). Calling it again changes the provider
    and nothing else: one instrumentation at a time.

    Raises:
        TracingUnavailableError: OpenTelemetry's API is not installed.
    """
    try:
        from plait.tracing import logs, spans
    except ImportError as exc:
        raise TracingUnavailableError(str(exc)) from exc
    hooks.active = spans.OtelTracer(tracer_provider)
    logs.install()


def uninstrument() -> None:
    """Stop tracing: runs started from now on make no spans, log records get no span ids."""
    if hooks.active is None:
        return
    hooks.active = None
    from plait.tracing import logs

    logs.remove()


def require_opentelemetry() -> None:
    """Refuse, at ``compile(tracing=True)``, a graph that could not be traced.

    Raises:
        TracingUnavailableError: OpenTelemetry's API is not installed.
    """
    try:
        import opentelemetry.trace  # noqa: F401 - only whether it imports
    except ImportError as exc:
        raise TracingUnavailableError(str(exc)) from exc


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in effect."""
    return hooks.active is not None
