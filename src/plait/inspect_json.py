"""One JSON shape per record: a thread, a checkpoint, a thread's summary, and the two diffs,
as the command line's ``--json`` prints them and the Studio's API sends them.

Built here, next to :mod:`plait.inspect` (which reads the records), so that every surface
says the same thing the same way: a checkpoint is ``checkpoint_id`` wherever it appears (a
thread's head, a diff's two sides, a fork's source); every time is ISO 8601 in UTC with
microseconds (``2025-01-31T12:00:00.000000+00:00``, a fixed width that sorts); a thread is
``thread_id`` with its ``namespace``. The command line's shapes are a published contract
(the JSON Schemas in ``docs/cli-schemas/``, which allow no other field); where the Studio
needs more, it asks for a superset by keyword, never a second shape.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from plait.checkpoint.model import Checkpoint, ThreadInfo
from plait.inspect import CheckpointDiff, ThreadDiff, ThreadSummary, next_nodes, stored_errors, waiting_interrupts

__all__ = [
    "checkpoint_diff_json",
    "checkpoint_json",
    "iso",
    "ref_json",
    "summary_json",
    "thread_diff_json",
    "thread_json",
]


def iso(ts: float) -> str:
    """Unix seconds as ISO 8601 in UTC, always with microseconds (a fixed width sorts)."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="microseconds")


def thread_json(t: ThreadInfo, *, paging: bool = False) -> dict[str, Any]:
    """A thread as a listing gives it: ``checkpoint_id``, ``step``, ``source`` and
    ``created_at`` are its head's; ``updated_at`` is when the thread last came to rest or was
    taken by a run. ``paging`` adds who holds its lease (``lease``: ``owner`` and
    ``expires_at``, or None) and its listing ``cursor``: what the Studio's pages show and page by."""
    record: dict[str, Any] = {
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
    if paging:
        lease = t.lease
        record["lease"] = None if lease is None else {"owner": lease.owner, "expires_at": iso(lease.expires_at)}
        record["cursor"] = t.cursor
    return record


def checkpoint_json(cp: Checkpoint, *, values: bool | Sequence[str] = True, detail: bool = False) -> dict[str, Any]:
    """A checkpoint: where it is, what runs next, what waits for input, its metadata, and
    (``values=True``) its values, or only the channels named in ``values``. ``detail`` adds
    ``writes`` (which node wrote which channels, from its metadata) and ``errors`` (the
    stored failures of its next step): what the Studio shows beside a checkpoint."""
    pending = cp.pending_writes
    record: dict[str, Any] = {
        "thread_id": cp.thread_id,
        "namespace": cp.namespace,
        "checkpoint_id": cp.id,
        "parent_id": cp.parent_id,
        "step": cp.step,
        "source": str(cp.metadata.get("source", "")),
        "created_at": iso(cp.created_at),
        "next": list(next_nodes(cp)),
        "interrupts": [i.to_json() for i in waiting_interrupts(pending)] if pending else [],
        "metadata": cp.metadata,
    }
    if detail:
        record["writes"] = cp.metadata.get("writes") or {}
        record["errors"] = stored_errors(pending) if pending else []
    if values is True:
        record["values"] = cp.values
    elif values is not False:
        record["values"] = {k: cp.values[k] for k in values if k in cp.values}
    return record


def ref_json(cp: Checkpoint) -> dict[str, Any]:
    """A pointer to a checkpoint: its thread, namespace, id and step."""
    return {"thread_id": cp.thread_id, "namespace": cp.namespace, "checkpoint_id": cp.id, "step": cp.step}


def summary_json(s: ThreadSummary) -> dict[str, Any]:
    """How a thread stands: the thread (with its lease and cursor), what runs next, what
    waits, what failed, and its head (without values: a page loads them one channel at a time)."""
    return {
        **thread_json(s.info, paging=True),
        "next": list(s.next),
        "interrupts": [i.to_json() for i in s.interrupts],
        "errors": list(s.errors),
        "head": checkpoint_json(s.head, values=False, detail=True),
    }


def checkpoint_diff_json(d: CheckpointDiff) -> dict[str, Any]:
    """The per-channel diff of two checkpoints: the two sides (``a`` None: ``b`` is a root),
    the keys that differ, and how each channel does."""
    return {
        "a": None if d.a is None else ref_json(d.a),
        "b": ref_json(d.b),
        "keys": list(d.keys),
        "channels": [c.to_json() for c in d.channels],
    }


def thread_diff_json(d: ThreadDiff[Checkpoint]) -> dict[str, Any]:
    """Where two threads part ways: their heads, the first step whose states differ (None:
    they never do), the keys that differ there, and how the heads differ."""
    return {
        "a": ref_json(d.head_a),
        "b": ref_json(d.head_b),
        "first_step": d.first_step,
        "keys": list(d.keys),
        "heads": d.heads.to_json(),
    }
