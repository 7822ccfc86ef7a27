"""The trace of the run that wrote a checkpoint, as the Studio shows and links it.

A traced top-level run stamps each checkpoint it stores with its span's ids (metadata
``trace``: ``{"trace_id": 32 hex, "span_id": 16 hex}``, see docs/tracing.md). The Studio reads
them back here and, given a link template (``plait studio --trace-url``), makes the link to
that trace in the user's tracing UI (Jaeger, Tempo, ...). Metadata is the caller's to write,
so anything that is not that shape is shown as nothing rather than failing the page, and only
hex ids ever reach a URL.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from plait import inspect as ins
from plait.checkpoint.base import Checkpointer
from plait.errors import PlaitError, TraceUrlError

__all__ = ["TraceLinks", "TraceRef", "check_trace_url", "queued_run_traces", "trace_of", "traces_by"]

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_FIELDS = frozenset({"trace_id", "span_id"})


@dataclass(frozen=True, slots=True)
class TraceRef:
    """The span of the run that wrote a checkpoint: its trace and its ``plait.run`` span."""

    trace_id: str
    span_id: str

    @property
    def short(self) -> str:
        """The first 8 hex digits: what a timeline row has room for (the whole id on hover)."""
        return self.trace_id[:8]


def trace_of(metadata: Mapping[str, Any]) -> TraceRef | None:
    """The trace a checkpoint's metadata names (None: none, or not the shape a run writes)."""
    stamp = metadata.get("trace")
    if not isinstance(stamp, Mapping):
        return None
    trace_id, span_id = stamp.get("trace_id"), stamp.get("span_id")
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        return None
    if not _TRACE_ID.fullmatch(trace_id) or not _SPAN_ID.fullmatch(span_id) or not trace_id.strip("0"):
        return None  # an all-zero trace id is OpenTelemetry's "no trace"
    return TraceRef(trace_id, span_id)


def traces_by(checkpoints: Iterable[Any], worker: str | None) -> list[TraceRef]:
    """The traces of the checkpoints a queued run's latest attempt wrote, oldest first, each
    once: those whose ``owner`` metadata is the run's ``worker`` (a worker names each attempt
    ``<worker>/job-<n>``, a later one with `` (attempt N)`` after it), newest first in
    ``checkpoints`` as a history page lists them."""
    if not worker:
        return []
    found: dict[TraceRef, None] = {}
    for cp in reversed(list(checkpoints)):
        owner = cp.metadata.get("owner")
        if isinstance(owner, str) and (owner == worker or owner.startswith(f"{worker} (attempt ")):
            ref = trace_of(cp.metadata)
            if ref is not None:
                found[ref] = None
    return list(found)


async def queued_run_traces(checkpointer: Checkpointer, run: Any, limit: int) -> list[TraceRef]:
    """:func:`traces_by` of a queued run (a :class:`plait.runs.Run`) among its thread's
    ``limit`` newest checkpoints: one history page, a look rather than a search; none before
    a worker took the run, or once its thread is gone. The run's own record of its latest
    traced attempt (:attr:`plait.runs.Run.trace`) comes too, even when that attempt's worker
    died before writing a checkpoint; each trace once."""
    if not run.worker:
        return []
    stored = trace_of({"trace": run.trace}) if getattr(run, "trace", None) else None
    try:
        page, _ = await ins.history(checkpointer, run.thread_id, namespace=run.namespace, limit=limit)
    except (PlaitError, ValueError):
        page = []
    found = traces_by(page, run.worker)
    if stored is not None and all(ref.trace_id != stored.trace_id for ref in found):
        found.append(stored)
    return found


def check_trace_url(template: str) -> str:
    """``template`` if a link can be made with it: an http(s) URL with ``{trace_id}`` (and
    optionally ``{span_id}``) where the ids go, and no other placeholder.

    Raises:
        TraceUrlError: it is not.
    """
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:  # a lone "{" or "}"
        why = f"it does not read as a template ({exc}); write a literal brace as {{{{ or }}}}"
        raise TraceUrlError(template, why) from None
    if "trace_id" not in fields:
        raise TraceUrlError(template, "it has no {trace_id}, so every checkpoint would link to the same page")
    unknown = sorted(fields - _FIELDS)
    if unknown:
        raise TraceUrlError(template, f"it names {', '.join(map(repr, unknown))}: only {{trace_id}} and {{span_id}}")
    parts = urlsplit(template.format(trace_id="0" * 32, span_id="0" * 16))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise TraceUrlError(template, "it is not an http:// or https:// URL with a host")
    return template


@dataclass(frozen=True, slots=True)
class TraceLinks:
    """The Studio's trace links: ``template`` (checked by :func:`check_trace_url`) or none."""

    template: str | None = None

    def url(self, ref: TraceRef) -> str | None:
        return None if self.template is None else self.template.format(trace_id=ref.trace_id, span_id=ref.span_id)

    def json(self, metadata: Mapping[str, Any]) -> dict[str, Any] | None:
        """What the API sends as a checkpoint's ``trace``: the ids and the link (None without
        a template), or None when the checkpoint names no trace."""
        ref = trace_of(metadata)
        if ref is None:
            return None
        return {"trace_id": ref.trace_id, "span_id": ref.span_id, "url": self.url(ref)}

    def add_to(self, record: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint record of :func:`plait.inspect_json.checkpoint_json` with its ``trace``."""
        record["trace"] = self.json(record.get("metadata") or {})
        return record
