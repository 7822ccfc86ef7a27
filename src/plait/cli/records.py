"""The JSON shapes of the command line's output, built in one place so that every command
says the same thing the same way.

One vocabulary: a checkpoint is named ``checkpoint_id`` wherever it appears (a thread's head,
a run's last checkpoint, a diff's two heads, a fork's source); every time is ISO 8601 in UTC
(``2025-01-31T12:00:00.000000+00:00``); a thread is ``thread_id`` with its ``namespace``.
The JSON Schemas in ``docs/cli-schemas/`` describe each shape, and a test holds the output
to them.
"""

import datetime
from collections.abc import Sequence
from typing import Any

from plait.checkpoint.model import Checkpoint, ThreadInfo, waiting_interrupts

__all__ = ["checkpoint_record", "iso", "ref", "short_ids", "thread_record"]


def iso(ts: float) -> str:
    """Unix seconds as ISO 8601 in UTC, always with microseconds (a fixed width sorts)."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="microseconds")


def thread_record(t: ThreadInfo) -> dict[str, Any]:
    """A thread as ``plait threads --json`` lists it: ``checkpoint_id``, ``step``, ``source``
    and ``created_at`` are its head's; ``updated_at`` is when the thread last came to rest or
    was taken by a run."""
    return {
        "thread_id": t.thread_id,
        "namespace": t.namespace,
        "status": t.status,
        "checkpoint_id": t.head_id,
        "step": t.step,
        "source": t.source,
        "created_at": iso(t.created_at),
        "updated_at": iso(t.updated_at),
        "checkpoints": t.checkpoints,
    }


def checkpoint_record(cp: Checkpoint, *, values: bool | Sequence[str] = True) -> dict[str, Any]:
    """A checkpoint: where it is, what runs next, what waits for input, its metadata, and
    (``values=True``) its values, or only the channels named in ``values``."""
    nodes = list(dict.fromkeys(t.node for t in cp.next_tasks))
    interrupts = [i.to_json() for i in waiting_interrupts(cp.pending_writes)] if cp.pending_writes else []
    record: dict[str, Any] = {
        "thread_id": cp.thread_id,
        "namespace": cp.namespace,
        "checkpoint_id": cp.id,
        "parent_id": cp.parent_id,
        "step": cp.step,
        "source": str(cp.metadata.get("source", "")),
        "created_at": iso(cp.created_at),
        "next": nodes,
        "interrupts": interrupts,
        "metadata": cp.metadata,
    }
    if values is True:
        record["values"] = cp.values
    elif values is not False:
        record["values"] = {k: cp.values[k] for k in values if k in cp.values}
    return record


def ref(cp: Checkpoint) -> dict[str, Any]:
    """A pointer to a checkpoint: its thread, namespace, id and step."""
    return {"thread_id": cp.thread_id, "namespace": cp.namespace, "checkpoint_id": cp.id, "step": cp.step}


SHORT_ID = 12
"""Hex digits shown of a checkpoint id in tables: 48 of the 52 bits of its microsecond clock,
so two checkpoints of one thread share a shortened id only when written within 16 µs."""


def short_ids(ids: Sequence[str]) -> int:
    """How many leading characters of each id a table shows: at least :data:`SHORT_ID`, more
    where two of ``ids`` would otherwise look alike (any unique prefix is accepted back)."""
    n = SHORT_ID
    longest = max((len(i) for i in ids), default=n)
    while n < longest and len({i[:n] for i in ids}) < len(set(ids)):
        n += 1
    return n
