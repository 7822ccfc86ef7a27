"""Log correlation: plait's own log records carry the ids of the span they were logged in,
as the attributes ``otelTraceID`` and ``otelSpanID`` (the names OpenTelemetry's logging
instrumentation uses, so a format string written for it works unchanged)."""

from __future__ import annotations

import logging

from opentelemetry import trace

__all__ = ["TraceIds", "install", "remove"]

_NAMES = ("plait", "plait.run", "plait.serve", "plait.server", "plait.store.sweeper", "plait.runs")
"""plait's loggers. A logger's filter sees only the records made on that logger, not on its
children, so each one gets the filter."""


class TraceIds(logging.Filter):
    """Adds the current span's ids to each record (``"0"`` outside a span: a format that
    names them never fails). Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.otelTraceID = format(ctx.trace_id, "032x")
            record.otelSpanID = format(ctx.span_id, "016x")
        else:
            record.otelTraceID = record.otelSpanID = "0"
        return True


_filter = TraceIds()
_on: list[logging.Logger] = []


def install() -> None:
    """Put the filter on every plait logger (those made so far, and the known ones)."""
    if _on:
        return
    names = set(_NAMES) | {n for n in logging.Logger.manager.loggerDict if n.startswith("plait.")}
    for name in sorted(names):
        logger = logging.getLogger(name)
        logger.addFilter(_filter)
        _on.append(logger)


def remove() -> None:
    while _on:
        _on.pop().removeFilter(_filter)
