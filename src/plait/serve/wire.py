"""The JSON documents of the LangGraph API, made from plait's records.

The shapes are the ones the LangGraph SDKs parse (``langgraph_sdk.schema``: ``Thread``,
``ThreadState``, ``Run``, ``Assistant``, ``Interrupt``); everything a route answers is built
here, so that a shape is spelled once. Times are ISO 8601 with an offset; values are the
checkpoint's JSON data as stored.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from starlette.responses import Response

from plait._frozen import thaw
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


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


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


def interrupt_json(i: Interrupt) -> dict[str, Any]:
    """An interrupt as the SDKs read it (``value``, ``id``), with plait's ``node`` beside."""
    return {"value": i.value, "id": i.id, "node": i.node}


def checkpoint_ref(thread_id: str, checkpoint_id: str | None, namespace: str = "") -> dict[str, Any] | None:
    if checkpoint_id is None:
        return None
    return {"thread_id": thread_id, "checkpoint_ns": namespace, "checkpoint_id": checkpoint_id, "checkpoint_map": None}


def state_json(state: ThreadState, *, root_parent: str | None = None) -> dict[str, Any]:
    """A ``ThreadState``: values, next nodes, tasks (with their interrupts and errors), the
    checkpoint and its parent, metadata. ``root_parent`` stands for the parent of a thread's
    first checkpoint (the empty state a client branches from to edit the first message)."""
    parent = state.parent_id if state.parent_id is not None else root_parent
    return {
        "values": thaw(state.values),
        "next": list(state.next),
        "tasks": [
            {
                "id": t.id,
                "name": t.node,
                "error": None if t.error is None else f"{t.error.type}: {t.error.message}",
                "interrupts": [interrupt_json(i) for i in t.interrupts],
                "checkpoint": None,
                "state": None,
                "result": thaw(t.result) if t.status == "done" else None,
            }
            for t in state.tasks
        ],
        "checkpoint": checkpoint_ref(state.thread_id, state.checkpoint_id, state.namespace),
        "metadata": {**thaw(state.metadata), "step": state.step},
        "created_at": iso(state.created_at),
        "parent_checkpoint": checkpoint_ref(state.thread_id, parent, state.namespace),
        "interrupts": [interrupt_json(i) for i in state.interrupts],
    }


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
