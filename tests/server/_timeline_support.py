"""Checkpoints written straight to a store, with the metadata a run records (``timings``,
``owner``) or any other: what the timeline tests read back without running a graph; and a
graph whose real run retries a node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait import END, START, CompiledGraph, Graph, RetryPolicy
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, new_checkpoint_id

from ._studio_support import schema


def write_step(
    saver: Checkpointer,
    thread: str,
    updates: Mapping[str, Any],
    *,
    source: str = "loop",
    metadata: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """A child of ``thread``'s head (or its root) writing ``updates``, with ``metadata``."""
    head = saver.get(thread)
    step = head.step + 1 if head else -1
    values = {**(head.values if head else {}), **updates}
    versions = {**(head.versions if head else {}), **dict.fromkeys(updates, step + 2)}
    cp = Checkpoint(
        thread_id=thread,
        id=new_checkpoint_id(head.id if head else None),
        parent_id=head.id if head else None,
        step=step,
        values=values,
        versions=versions,
        metadata={"source": source, "step": step, **(metadata or {})},
        created_at=1_700_000_000.0 + step,
    )
    changed = frozenset(updates) if head else frozenset(values)
    saver.commit(checkpoints=[CheckpointWrite(checkpoint=cp, changed=changed)])
    got = saver.get(thread, cp.id)
    assert got is not None
    return got


def retried_graph() -> CompiledGraph:
    """``plan``, then ``fetch`` (which fails once, then succeeds: its RetryPolicy runs it
    again) beside ``search``, then ``write``: a run whose steps have timings and a retry."""
    failures = [1]

    def fetch(state: Mapping[str, Any]) -> dict[str, Any]:
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("the source did not answer")
        return {"notes": [f"fetched about {state['topic']}"]}

    g = Graph(schema())
    g.add_node("plan", lambda s: {"style": "brief"})
    g.add_node("fetch", fetch, retry=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0))
    g.add_node("search", lambda s: {"sources": {"web": 3}})
    g.add_node("write", lambda s: {"answer": f"{len(s['notes'])} notes"})
    g.add_edge(START, "plan").add_edge("plan", "fetch").add_edge("plan", "search")
    g.add_edge(["fetch", "search"], "write").add_edge("write", END)
    return g.compile(name="research")
