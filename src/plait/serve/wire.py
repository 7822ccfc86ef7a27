"""The JSON documents of the LangGraph API, made from plait's records.

The shapes are the ones the LangGraph SDKs parse (``langgraph_sdk.schema``: ``Thread``,
``ThreadState``, ``Run``, ``Assistant``, ``Interrupt``); everything a route answers is built
here, so that a shape is spelled once. Times are ISO 8601 with an offset; values are the
checkpoint's JSON data as stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from starlette.responses import Response

from plait._frozen import thaw
from plait.graph.api_state import checkpoint_ref, interrupt_json, iso, state_json
from plait.graph.records import ThreadState
from plait.serve.records import RunRecord, ThreadRecord
from plait.types import Interrupt

__all__ = [
    "ApiThreadStatus",
    "checkpoint_ref",
    "dumps",
    "interrupt_json",
    "iso",
    "json_response",
    "run_json",
    "state_json",
    "thread_json",
]

ApiThreadStatus = str
"""``idle``, ``busy``, ``interrupted`` or ``error``, as the SDKs name a thread's status."""


def dumps(value: Any) -> bytes:
    """JSON bytes of an answer (frozen containers and interrupts included)."""
    return orjson.dumps(value, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, Interrupt):
        return interrupt_json(value)
    if isinstance(value, tuple | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")


def json_response(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(dumps(value), status_code=status, media_type="application/json", headers=dict(headers or {}))


def thread_json(
    record: ThreadRecord, state: ThreadState | None, status: ApiThreadStatus, *, select: Sequence[str] | None = None
) -> dict[str, Any]:
    """A ``Thread``: its metadata, status, latest values and pending interrupts by task."""
    interrupts: dict[str, list[dict[str, Any]]] = {}
    if state is not None:
        for i in state.interrupts:
            interrupts.setdefault(i.task_id, []).append(interrupt_json(i))
    doc = {
        "thread_id": record.thread_id,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "metadata": record.metadata,
        "status": status,
        "values": thaw(state.values) if state is not None else None,
        "interrupts": interrupts,
        "config": {},
    }
    return {k: v for k, v in doc.items() if k in select} if select else doc


def run_json(run: RunRecord) -> dict[str, Any]:
    """A ``Run``: ids, status, metadata, strategy, and what it was asked for (``kwargs``)."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": run.assistant_id,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "status": run.status,
        "metadata": run.metadata,
        "multitask_strategy": run.multitask,
        "kwargs": run.kwargs,
    }
