"""Planning a super-step: which tasks run next. Pure functions, no I/O.

A finished task's *routes* (its static edges, what its routers chose, its ``Command.goto``)
are computed when it finishes and saved with its writes, so planning needs only the
finished tasks in planned order and the join barriers, and gives the same answer on every
replay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from plait.checkpoint.model import Checkpoint, Task, make_checkpoint, make_task, task_id
from plait.engine.spec import GraphSpec
from plait.types import END

__all__ = [
    "Route",
    "bare_checkpoint",
    "hold_deferred",
    "plan_next",
    "renamed_tasks",
    "route_json",
    "task_id",
    "with_held",
]

Route = str | tuple[str, Any]
"""A node name, or ``(node, arg)`` for a Send."""


def route_json(routes: Sequence[Route]) -> list[Any]:
    return [r if isinstance(r, str) else [r[0], r[1]] for r in routes]


def routes_from_json(data: Sequence[Any]) -> list[Route]:
    return [r if isinstance(r, str) else (r[0], r[1]) for r in data]


def plan_next(
    spec: GraphSpec,
    checkpoint_id: str,
    finished: Sequence[tuple[Task, Sequence[Route]]],
    barriers: Mapping[str, tuple[str, ...]],
) -> tuple[tuple[Task, ...], dict[str, tuple[str, ...]]]:
    """The tasks of the next super-step and the join barriers after this one.

    Plain triggers of one node collapse into one task (in first-triggered order); every
    Send is its own task, after the plain ones; a join's target is triggered in the step
    after its last source finished, and its barrier resets.
    """
    nodes: dict[str, None] = {}
    sends: list[tuple[str, Any]] = []
    arrived: dict[str, set[str]] | None = None
    joins_by_source = spec.joins_by_source
    for task, routes in finished:
        for r in routes:
            if isinstance(r, str):
                if r != END:
                    nodes[r] = None
            else:
                sends.append(r)
        joins = joins_by_source.get(task.node)
        if joins:
            if arrived is None:
                arrived = {k: set(v) for k, v in barriers.items()}
            for j in joins:
                got = arrived.setdefault(j.id, set())
                got.add(task.node)
                if got >= j.sources:
                    if j.target != END:  # a join to END: the branches just end together
                        nodes[j.target] = None
                    del arrived[j.id]
    tasks = [make_task(task_id(checkpoint_id, n, 0), n, False, None) for n in nodes]
    if sends:
        tasks.extend(_send_tasks(checkpoint_id, sends))
    if arrived is None:
        return tuple(tasks), dict(barriers)
    return tuple(tasks), {k: tuple(sorted(v)) for k, v in arrived.items() if v}


def hold_deferred(spec: GraphSpec, tasks: Sequence[Task]) -> tuple[Sequence[Task], tuple[Task, ...]]:
    """``(tasks to run now, deferred tasks held back)``: a deferred node's task waits while
    any other task is pending, and runs in the first step that has only deferred ones."""
    held = tuple(t for t in tasks if spec.nodes[t.node].defer)
    if not held or len(held) == len(tasks):
        return tasks, ()
    return [t for t in tasks if not spec.nodes[t.node].defer], held


def with_held(planned: tuple[Task, ...], held: tuple[Task, ...]) -> tuple[Task, ...]:
    """The next step's tasks: those planned, then the held-back deferred ones (a deferred
    node planned again is the same task: it runs once)."""
    if not held:
        return planned
    nodes = {t.node for t in planned if not t.send}
    return planned + tuple(t for t in held if t.send or t.node not in nodes)


def _send_tasks(checkpoint_id: str, sends: Sequence[tuple[str, Any]]) -> list[Task]:
    """The Send tasks, ids as :func:`task_id` gives them; a fan-out of a hundred Sends to one
    node hashes the common prefix once and copies the hash state per task."""
    prefixes: dict[str, Any] = {}
    out = []
    for i, (node, arg) in enumerate(sends, 1):
        prefix = prefixes.get(node)
        if prefix is None:
            prefix = prefixes[node] = hashlib.blake2b(f"{checkpoint_id}|{node}|".encode(), digest_size=8)
        h = prefix.copy()
        h.update(str(i).encode())
        out.append(make_task(h.hexdigest(), node, True, arg))
    return out


def bare_checkpoint(
    cid: str, cur: Checkpoint, tasks: tuple[Task, ...], barriers: dict[str, tuple[str, ...]]
) -> Checkpoint:
    """Without a checkpointer nothing is stored: keep only what the loop reads next."""
    # (Checkpoint's fields in order: thread, namespace, id, parent, step, values, versions,
    # next tasks, barriers, metadata, created at, pending writes)
    return make_checkpoint("", "", cid, None, cur.step + 1, {}, {}, tasks, barriers, {}, 0.0, ())


def renamed_tasks(tasks: tuple[Task, ...], checkpoint_id: str) -> tuple[Task, ...]:
    """``tasks`` with ids of their own for a branch started at ``checkpoint_id`` (time
    travel), so that their subgraphs run afresh in namespaces of their own instead of
    continuing the runs of the original tasks."""
    return tuple(replace(t, id=task_id(checkpoint_id, t.node, i)) for i, t in enumerate(tasks))
