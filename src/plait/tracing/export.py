"""Traces sent over OTLP/HTTP, set up from the standard ``OTEL_*`` environment variables: what
``plait worker --otel`` and ``plait serve --otel`` turn on.

The OpenTelemetry SDK reads most of those variables itself: the exporter its headers, timeout,
compression and certificates; the tracer provider its sampler and ``OTEL_SDK_DISABLED``; the
batch processor its queue size and delay; the resource ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES``. Left to the program that sets the SDK up, and so read here:
which exporters ``OTEL_TRACES_EXPORTER`` names, the endpoint (resolved here so that the line a
command prints names the address the spans really go to), and a service name when none is set.

Only OTLP over HTTP with protobuf bodies is shipped (the ``otel-export`` extra): every OTLP
backend takes it (port 4318), and it needs no gRPC. Nothing here is imported unless ``--otel``
is given.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from plait.errors import ArgumentError, TracingUnavailableError

__all__ = ["EXPORTERS", "Exporting", "export_from_env", "traces_endpoint"]

EXPORTERS = ("otlp", "console", "none")
"""The values ``OTEL_TRACES_EXPORTER`` may list (comma-separated; default ``otlp``)."""

DEFAULT_ENDPOINT = "http://localhost:4318"
"""OTLP/HTTP's standard address: a collector, Jaeger or Tempo on this machine."""


@dataclass(slots=True)
class Exporting:
    """Traces being sent: what to say about it, and how to stop at process end."""

    said: str
    """One line for the operator: where the spans go, under which service name."""
    provider: Any
    """The SDK's ``TracerProvider`` plait is instrumented with (None: ``OTEL_SDK_DISABLED``)."""

    def shutdown(self) -> None:
        """Stop tracing, export the spans still queued, then close the exporters.

        Called when the worker or server stops (SIGTERM, Ctrl-C): the batch processor holds
        the spans of the last seconds' runs, which would be lost without it. Blocks at most
        the exporter's timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s) per batch left.
        """
        if self.provider is None:
            return
        from plait.tracing import uninstrument

        uninstrument()
        self.provider.shutdown()


def export_from_env(service: str, *, set_global: bool = True) -> Exporting:
    """Instrument plait with an SDK tracer provider built from the ``OTEL_*`` variables.

    Args:
        service: The ``service.name`` when neither ``OTEL_SERVICE_NAME`` nor
            ``OTEL_RESOURCE_ATTRIBUTES`` names one (``plait-worker``, ``plait-serve``).
        set_global: Make the provider OpenTelemetry's global one as well, unless one is set
            already, so that the spans the graphs' nodes make (with ``trace.get_tracer``, or
            an HTTP client's or LLM SDK's instrumentation) are sent with plait's, nested
            under their task's span.

    Returns:
        The export, to :meth:`Exporting.shutdown` when the process stops.

    Raises:
        TracingUnavailableError: the SDK or the OTLP/HTTP exporter is not installed.
        ArgumentError: ``OTEL_TRACES_EXPORTER`` names an exporter plait does not ship, or
            the OTLP protocol asked is not ``http/protobuf``.
    """
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise TracingUnavailableError(str(exc), export=True) from exc
    from plait.tracing import instrument

    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return Exporting(said="traces: none sent (OTEL_SDK_DISABLED is true)", provider=None)
    exporters = _exporters()
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "unknown_service")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service}))
    name = str(resource.attributes["service.name"])
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    where = []
    if "otlp" in exporters:
        _check_protocol()
        endpoint = traces_endpoint()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        where.append(f"OTLP/HTTP to {endpoint}")
    if "console" in exporters:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stdout)))
        where.append("the console")
    instrument(tracer_provider=provider)
    if set_global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    if not where:
        said = "traces: none sent (OTEL_TRACES_EXPORTER is none)"
    else:
        said = f"traces: {' and '.join(where)}, as service {name}"
    return Exporting(said=said, provider=provider)


def traces_endpoint() -> str:
    """Where the spans are posted: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as it is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` with the signal's path ``/v1/traces`` added (the OTLP
    rule), else ``http://localhost:4318/v1/traces``."""
    own = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if own:
        return own
    base = _env("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    return base.rstrip("/") + "/v1/traces"


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _exporters() -> set[str]:
    names = {n.strip().lower() for n in _env("OTEL_TRACES_EXPORTER").split(",") if n.strip()} or {"otlp"}
    unknown = sorted(names - set(EXPORTERS))
    if unknown:
        raise ArgumentError(
            "OTEL_TRACES_EXPORTER",
            f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}, which --otel does not send to: set it to otlp "
            "(the default; every OTLP backend takes it), console or none, or unset it",
        )
    return names - {"none"}


def _check_protocol() -> None:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = _env(name)
        if protocol and protocol != "http/protobuf":
            raise ArgumentError(
                name,
                f"{name} is {protocol!r}, and --otel sends OTLP over HTTP with protobuf bodies: set it to "
                "http/protobuf or unset it, and point the endpoint at the backend's OTLP/HTTP port (4318, not "
                "gRPC's 4317)",
            )
        if protocol:
            return
