"""A checkpoint as the LangGraph API's ``ThreadState`` document: what ``plait serve`` answers
for a thread's state and what the ``checkpoints`` and ``debug`` stream modes carry (the
server's own runs and, on PostgreSQL, a run queue's workers make them alike)."""

from __future__ import annotations

import datetime
from typing import Any

from plait._frozen import thaw
from plait.checkpoint.base import Checkpointer
from plait.graph.records import ThreadState
from plait.stream_wire import Translator
from plait.types import Interrupt

__all__ = ["checkpoint_events", "checkpoint_ref", "interrupt_json", "iso", "state_json"]


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


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


async def checkpoint_events(
    translator: Translator,
    checkpointer: Checkpointer,
    thread_id: str,
    namespace: str,
    ns: tuple[str, ...],
    saved: Any,
    at: str | None = None,
) -> list[tuple[str, Any]]:
    """The ``checkpoints`` and ``debug`` events of a run's ``CheckpointSaved`` event (none when
    not asked for): the checkpoint read back from ``checkpointer``. ``namespace`` is the run's
    own, ``ns`` the subgraph's segments below it (``()`` for the run's own checkpoint); ``at``
    when the event came (the ``debug`` event's timestamp; now when not given)."""
    if not translator.wants_checkpoints() or (ns and not translator.subgraphs):
        return []
    cp = await checkpointer.aget(thread_id, saved.checkpoint_id, namespace="|".join(p for p in (namespace, *ns) if p))
    return [] if cp is None else translator.checkpoint_events(ns, state_json(ThreadState.of(cp)), cp.step, at)
