"""Reading and writing a super-step's pending writes: results, resume values, interrupts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from plait._codec import freeze
from plait.checkpoint.model import Checkpoint, PendingWrite, Task, waiting_interrupts
from plait.engine.plan import plan_next, route_json
from plait.engine.spec import GraphSpec
from plait.engine.tasks import TaskOutcome, goto_routes
from plait.errors import InvalidResumeError
from plait.types import START

__all__ = [
    "goto_tasks",
    "incompatibilities",
    "result_write",
    "resume_values",
    "resume_writes",
]


def goto_tasks(spec: GraphSpec, checkpoint_id: str, goto: Any) -> tuple[tuple[Task, ...], dict[str, tuple[str, ...]]]:
    """What ``invoke(Command(goto=...))`` runs next on a paused or finished thread: the
    targets, planned as if START routed there (a fresh step: no join is half-way).

    Raises:
        MissingNodeError: a target the graph does not have.
    """
    tasks, _ = plan_next(spec, checkpoint_id, [(Task(id="", node=START), goto_routes(goto, spec.nodes, START))], {})
    return tasks, {}


def result_write(task_id: str, out: TaskOutcome) -> PendingWrite:
    """A finished task's saved result: its writes, its routes, and its memory store writes
    (``"m"``, only when it made some), all of which its step commits; and how long it took
    and in how many attempts (``"t"``), for the step's ``timings`` when a resume finishes it."""
    value: dict[str, Any] = {"w": [[k, v] for k, v in out.writes], "r": route_json(out.routes)}
    if out.memory:
        value["m"] = [w.to_json() for w in out.memory]
    if out.seconds is not None:
        value["t"] = [round(out.seconds, 6), out.attempts]
    return PendingWrite(task_id=task_id, kind="result", value=value)


def resume_values(pending: Sequence[PendingWrite]) -> dict[str, list[Any]]:
    return {p.task_id: list(p.value) for p in pending if p.kind == "resume"}


def resume_writes(thread_id: str | None, pending: Sequence[PendingWrite], resume: Any) -> list[PendingWrite]:
    """The ``resume`` pending writes that answer the thread's waiting interrupts.

    One waiting node takes a bare value; with several, ``resume`` maps interrupt ids to
    values. Each task's write holds all its resume values so far, in interrupt order.
    """
    active = waiting_interrupts(pending)
    if not active:
        raise InvalidResumeError(thread_id, "it has no pending interrupt; use invoke(None, ...) to continue it")
    by_id = {i.id: i for i in active}
    if isinstance(resume, Mapping) and resume and all(k in by_id for k in resume):
        chosen = dict(resume)
    elif len({i.task_id for i in active}) == 1:
        chosen = {active[0].id: resume}
    else:
        raise InvalidResumeError(
            thread_id,
            "several interrupts are pending; pass Command(resume={interrupt_id: value, ...}) with ids "
            + ", ".join(repr(i) for i in by_id),
        )
    values = resume_values(pending)
    new: list[PendingWrite] = []
    for iid, value in chosen.items():
        rec = by_id[iid]
        got = values.setdefault(rec.task_id, [])
        if rec.index != len(got):
            raise InvalidResumeError(thread_id, f"interrupt {iid!r} is not the next one of its node")
        got.append(freeze(value, "resume", rec.node))
        new.append(PendingWrite(task_id=rec.task_id, kind="resume", value=list(got)))
    return new


def incompatibilities(spec: GraphSpec, head: Checkpoint, reducers: Mapping[str, str] | None) -> list[str]:
    """Why ``spec`` cannot continue ``head``: pending nodes it lacks, channels holding values
    it dropped, channels whose reducer changed (``reducers``: as recorded with the thread)."""
    schema = spec.schema
    changes = [f"pending node {t.node!r} no longer exists" for t in head.next_tasks if t.node not in spec.nodes]
    changes += [f"channel {k!r} holds a value but is no longer in the schema" for k in head.values if k not in schema]
    for key, old in (reducers or {}).items():
        if key in schema and schema.channel(key).reducer.spec() != old:
            changes.append(f"channel {key!r} changed reducer from {old} to {schema.channel(key).reducer.spec()}")
    return changes
