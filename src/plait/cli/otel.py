"""``--otel`` of ``plait worker`` and ``plait serve``: their runs' traces sent over OTLP/HTTP
(:mod:`plait.tracing.export`), set up before they serve and flushed when they stop."""

import contextlib
from collections.abc import Iterator

__all__ = ["sending_traces"]


@contextlib.contextmanager
def sending_traces(on: bool, service: str) -> Iterator[str | None]:
    """Trace the block's runs when ``on``; at its end (a signal's clean stop included) send
    the spans still queued, so that the last runs' traces are not lost.

    Entered after a ``--config``'s env is set (it may hold the ``OTEL_*`` variables) and
    before the store is opened, so that a missing extra is said before anything is created.
    Yields the line the command prints among its own (where the spans go), None when off.
    """
    if not on:
        yield None
        return
    from plait.tracing.export import export_from_env

    sending = export_from_env(service)
    try:
        yield sending.said
    finally:
        sending.shutdown()
