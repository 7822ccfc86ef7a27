"""A trace that crosses processes: the W3C trace context a queued run is stored with, so that
the worker's spans for it continue the submitter's trace, and the ids of each attempt's span,
so that the next attempt can link to one whose worker died before exporting it.

Nothing here imports OpenTelemetry unless the process already did: a submitter that has not
imported it has no current span to store, and a worker that does not trace has no use for
the stored context.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from plait.errors import TraceContextError

__all__ = [
    "annotate",
    "checked",
    "continuing",
    "current",
    "from_environment",
    "from_headers",
    "parse_stamp",
    "stamp_text",
]

_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def current() -> dict[str, str] | None:
    """The current span's context as W3C headers (``traceparent``, and ``tracestate`` when it
    has one), or None: OpenTelemetry not imported, or no span active."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    found = {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}
    return found if "traceparent" in found else None


def checked(given: Mapping[str, Any], where: str) -> dict[str, str]:
    """``given`` as a stored trace context: ``traceparent`` in W3C form, ``tracestate`` kept
    as it is.

    Raises:
        TraceContextError: no ``traceparent``, or one that is not W3C trace context.
    """
    parent = given.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent.strip()):
        raise TraceContextError(where, parent)
    carrier = {"traceparent": parent.strip()}
    state = given.get("tracestate")
    if isinstance(state, str) and state.strip():
        carrier["tracestate"] = state.strip()
    return carrier


def from_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The context a shell hands a command in ``TRACEPARENT``/``TRACESTATE`` (None: unset).

    Raises:
        TraceContextError: ``TRACEPARENT`` is set to something else than W3C trace context.
    """
    parent = environ.get("TRACEPARENT")
    if not parent:
        return None
    return checked({"traceparent": parent, "tracestate": environ.get("TRACESTATE", "")}, "TRACEPARENT")


def from_headers(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The context of an HTTP request's ``traceparent``/``tracestate`` headers (None: none, or
    one that is not W3C trace context, which the W3C says to ignore rather than refuse)."""
    parent = headers.get("traceparent")
    if not parent:
        return None
    try:
        return checked({"traceparent": parent, "tracestate": headers.get("tracestate", "")}, "traceparent")
    except TraceContextError:
        return None


@contextlib.contextmanager
def continuing(carrier: Any) -> Iterator[None]:
    """Make the span ``carrier`` names the parent of the spans started inside (nothing when it
    names none). Only for a process that traces: it imports OpenTelemetry."""
    if not isinstance(carrier, Mapping) or "traceparent" not in carrier:
        yield
        return
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # detached elsewhere: nothing to undo
            context.detach(token)


def annotate(attributes: Mapping[str, str | int]) -> None:
    """Set ``attributes`` on the current span (a host's, on the run span it was told of)."""
    if "opentelemetry.trace" in sys.modules:
        from opentelemetry import trace

        trace.get_current_span().set_attributes(dict(attributes))


def stamp_text(stamp: Mapping[str, str]) -> str:
    """How a run row stores an attempt's span: ``<trace id>-<span id>``, hex."""
    return f"{stamp['trace_id']}-{stamp['span_id']}"


def parse_stamp(text: str | None) -> dict[str, str] | None:
    """The span :func:`stamp_text` stored (None: none, or unreadable)."""
    if not text:
        return None
    trace_id, _, span_id = text.partition("-")
    if len(trace_id) != 32 or len(span_id) != 16:
        return None
    return {"trace_id": trace_id, "span_id": span_id}
