"""The root of the tree and what every exception module shares (see :mod:`plait.errors`)."""

from __future__ import annotations

from typing import Any

__all__ = ["DrawingUnavailableError", "PlaitError", "TracingUnavailableError", "describe"]


def at_node(node: str | None) -> str:
    return f" (written by node {node!r})" if node else ""


class PlaitError(Exception):
    """Root of every error plait raises on purpose."""


class DrawingUnavailableError(PlaitError, ImportError):
    """A drawing that needs an optional package: ``get_graph().draw_png()`` without cairosvg."""

    def __init__(self, what: str, why: str) -> None:
        self.what = what
        super().__init__(
            f"{what} turns the graph's SVG into a PNG with cairosvg, which did not load ({why}): "
            "pip install 'plait[draw]' (cairosvg, and the cairo library it uses). draw_svg() and "
            "draw_mermaid() need nothing; plait never sends a graph to a web service to draw it."
        )


class TracingUnavailableError(PlaitError, ImportError):
    """``plait.instrument()`` in an environment without OpenTelemetry's API, or ``--otel``
    (``plait worker``, ``plait serve``) without its SDK and OTLP exporter."""

    def __init__(self, why: str, *, export: bool = False) -> None:
        self.export = export
        """Whether exporting was asked (``--otel``: the ``otel-export`` extra is missing)."""
        if export:
            message = (
                f"--otel sends traces with OpenTelemetry's SDK and OTLP/HTTP exporter, which did not import ({why}): "
                "pip install 'plait[otel-export]', or run without --otel."
            )
        else:
            message = (
                f"plait.instrument() needs OpenTelemetry, which did not import ({why}): "
                "pip install 'plait[otel]' (and opentelemetry-sdk with an exporter to send the spans somewhere)."
            )
        super().__init__(message)


def utc_text(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="milliseconds")


def describe(value: Any) -> str:
    """A short type name for messages (``datetime``, ``MyClass``)."""
    return type(value).__name__


class TraceContextError(PlaitError, ValueError):
    """A W3C trace context (``TRACEPARENT``, ``submit(trace_context=...)``) plait cannot read."""

    def __init__(self, where: str, value: object) -> None:
        self.where = where
        self.value = value
        super().__init__(
            f"{where} is not a W3C trace context: {value!r}. It must look like "
            "'00-<32 hex trace id>-<16 hex span id>-<2 hex flags>' (as an OpenTelemetry propagator writes "
            f"it); fix or unset {where}."
        )
