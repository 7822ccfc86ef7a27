"""A tiny OTLP/HTTP receiver: what a collector, Jaeger or Tempo would be, on 127.0.0.1.

It takes ``POST /v1/traces`` with a protobuf ``ExportTraceServiceRequest`` body (gzip or not),
as OpenTelemetry's OTLP/HTTP exporter sends it, and keeps each span with its resource's
attributes, the ids as hex, and its attributes as plain values.
"""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    """"" for a root span."""
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


@dataclass
class Receiver:
    """The spans received so far, and the URL to send them to."""

    url: str
    spans: list[Span] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def take(self, path: str, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = [
            Span(
                name=span.name,
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex(),
                attributes=_attributes(span.attributes),
                resource=_attributes(rs.resource.attributes),
            )
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        with self.changed:
            self.paths.append(path)
            self.spans.extend(got)
            self.changed.notify_all()

    def wait(self, until: Callable[[list[Span]], bool], timeout: float = 60) -> list[Span]:
        """The spans once ``until(spans)`` holds (an AssertionError after ``timeout``)."""
        with self.changed:
            if not self.changed.wait_for(lambda: until(list(self.spans)), timeout):
                raise AssertionError(f"spans not received within {timeout} s: {[s.name for s in self.spans]}")
            return list(self.spans)

    def named(self, name: str) -> list[Span]:
        with self.changed:
            return [s for s in self.spans if s.name == name]


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver serving on a free loopback port until the block ends."""
    holder: list[Receiver] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            holder[0].take(self.path, body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Receiver(url=f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
