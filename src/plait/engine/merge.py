"""What a super-step's writes become: pure functions of the step's tasks and results.

No store, no event loop, no clock: the loop hands these the results it gathered and gets back
the values to apply, the metadata to record and the records of what failed, so that merging
can be tested on its own (STYLE §2) and reads the same in every durability mode.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from plait._fast_init import given_maker
from plait.checkpoint.model import PendingWrite, Task
from plait.checkpoint.retention import RETENTION_KEY
from plait.engine.pending import resume_values
from plait.engine.plan import Route, routes_from_json
from plait.engine.spec import GraphSpec
from plait.errors import ConcurrentWriteError, NodeError
from plait.state.run_state import RunState
from plait.state.schema import StateSchema
from plait.store import MemoryWrite

__all__ = [
    "CARRIED_KEYS",
    "Results",
    "StepInputs",
    "checkpoint_metadata",
    "error_write",
    "merge_step",
    "no_pending",
    "read_pending",
    "step_timings",
    "thread_version",
    "written_keys",
]

Results = dict[str, tuple[list[tuple[str, Any]], list[Route]]]
"""A step's finished tasks: task id -> (its writes in order, its routes)."""


@dataclass(slots=True)
class StepInputs:
    """What a checkpoint's pending writes say about the step it starts."""

    results: Results = field(default_factory=dict)
    """Tasks that finished before (a crash, a failure or an interrupt cut the step short):
    they are not run again, their saved writes are merged."""
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Recorded ``ctx.once`` results, per task: a re-run task gets them back, not re-done."""
    resume: dict[str, list[Any]] = field(default_factory=dict)
    """Answers to ``interrupt()``, per task, in the order asked."""
    breakpoint_taken: bool = False
    """A breakpoint before this step already paused once: the resume goes past it."""
    memory: dict[str, list[MemoryWrite]] = field(default_factory=dict)
    """The memory store writes of the finished tasks, per task: committed with the step."""
    timings: dict[str, tuple[float, int]] = field(default_factory=dict)
    """How long each finished task took and in how many attempts (seconds, attempts)."""


no_pending = given_maker(StepInputs, ())
"""``StepInputs()`` at under half the cost (see :func:`~plait._fast_init.given_maker`): a
step started with no pending writes, as most are."""


def read_pending(pending: Sequence[PendingWrite], schema: StateSchema) -> StepInputs:
    """Sort a checkpoint's pending writes into what the step needs (see :class:`StepInputs`)."""
    inputs = StepInputs(resume=resume_values(pending))
    for pw in pending:
        if pw.kind == "result":
            # (with_ids: results saved before messages were named by task have none yet)
            writes = schema.with_ids([(w[0], w[1]) for w in pw.value["w"]], pw.task_id)
            inputs.results[pw.task_id] = (writes, routes_from_json(pw.value["r"]))
            if "m" in pw.value:
                inputs.memory[pw.task_id] = [MemoryWrite.from_json(m) for m in pw.value["m"]]
            took = pw.value.get("t")
            if isinstance(took, list) and len(took) == 2:
                inputs.timings[pw.task_id] = (took[0], took[1])
        elif pw.kind == "effect":
            inputs.effects.setdefault(pw.task_id, {})[pw.key] = pw.value
        elif pw.kind == "breakpoint" and pw.key != "after":
            inputs.breakpoint_taken = True
    return inputs


def merge_step(
    state: RunState,
    tasks: Sequence[Task],
    results: Results,
    base: Mapping[str, Any],
    step: int,
    lww: frozenset[str],
    folded: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fold every task's writes through the reducers in planned task order (the order that
    makes a merge deterministic whatever order the tasks finished in) and return the changed
    values, without applying them. ``folded``: a lone task's writes already folded on
    ``base`` (:attr:`TaskOutcome.folded <plait.engine.tasks.TaskOutcome.folded>`), returned
    as they are.

    Raises:
        ConcurrentWriteError: two tasks wrote one last-write-wins channel (in ``lww``).
        StateError: a reducer refused a write.
    """
    if len(tasks) == 1:
        if folded is not None:
            return folded
        writes = results[tasks[0].id][0]
        return state.fold(base, writes, tasks[0].node) if writes else {}
    batches = [(results[t.id][0], t.node) for t in tasks]
    if lww:
        writer: dict[str, Task] = {}
        for t, (writes, _node) in zip(tasks, batches, strict=True):
            for key, _ in writes:
                if key in lww:
                    prev = writer.get(key)
                    if prev is not None and prev.id != t.id:
                        raise ConcurrentWriteError(key, (prev.node, t.node), step)
                    writer[key] = t
    return state.fold_many(base, batches)


def step_timings(tasks: Sequence[Task], timings: Mapping[str, tuple[float, int]]) -> list[list[Any]]:
    """``[[node, seconds, attempts], ...]``, one per task of a step in task order (a task with
    no measure, finished by a run of an older plait, is left out): a step checkpoint's
    ``timings`` metadata, which the Studio's timeline shows."""
    out: list[list[Any]] = []
    for t in tasks:
        took = timings.get(t.id)
        if took is not None:
            out.append([t.node, round(took[0], 6), took[1]])
    return out


def written_keys(tasks: Sequence[Task], results: Results) -> dict[str, list[str]]:
    """``{node: [channel, ...]}``: which node wrote which channels in a step, each once, in
    the order written (a checkpoint's ``writes`` metadata)."""
    out: dict[str, list[str]] = {}
    for t in tasks:
        for key, _ in results[t.id][0]:
            written = out.setdefault(t.node, [])
            if key not in written:
                written.append(key)
    return out


TRACEBACK_MAX = 16_000
"""Characters of a failed task's traceback kept with its error (the end, where it failed)."""


def error_write(task_id: str, node: str, step: int, error: BaseException) -> PendingWrite:
    """The ``error`` pending write of a failed task (or of the step, with no task id): what
    failed and why, kept with the checkpoint so the thread can say so; a resume ignores it
    and runs the task again."""
    cause = error.__cause__ if isinstance(error, NodeError) and error.__cause__ is not None else error
    text = "".join(traceback.format_exception(cause))
    return PendingWrite(
        task_id=task_id,
        kind="error",
        value={
            "node": node or None,
            "step": step,
            "error": type(error).__name__,
            "type": f"{type(cause).__module__}.{type(cause).__qualname__}",
            "message": str(cause),
            "traceback": text[-TRACEBACK_MAX:],
        },
    )


CARRIED_KEYS: Final = (RETENTION_KEY,)
"""Metadata keys that are the thread's rather than one run's: every checkpoint carries them
on from the one it follows (a thread's metadata is its head's, see
:mod:`plait.checkpoint.retention`), until a run's ``metadata=`` sets them again."""


def thread_version(metadata: Mapping[str, Any]) -> int:
    """The version of the graph that wrote a checkpoint (1: written before versions existed)."""
    v = metadata.get("graph_version")
    return v if type(v) is int and v >= 1 else 1


def checkpoint_metadata(
    source: str,
    step: int,
    spec: GraphSpec,
    graph_fp: str,
    *,
    writes: Mapping[str, list[str]] | None = None,
    run_id: str | None = None,
    user: Mapping[str, Any] | None = None,
    carry: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The metadata every checkpoint plait writes carries: where it came from (``source``:
    input, loop, update, replay, fork), its step, which node wrote which channels, and the
    graph's fingerprint and reducers (what a resume checks compatibility against), and a
    versioned graph's name and version (what a resume migrates from). The one
    place a run, an update and a fork build it. ``user`` is the caller's ``metadata=``: its
    keys come first, so plait's own keys (``source``, ``step``, ...) always win. ``carry`` is
    the metadata of the checkpoint this one follows: the keys of :data:`CARRIED_KEYS` it holds
    go on unless ``user`` sets them, so a thread's own retention policy, given once, lasts."""
    kept = {k: carry[k] for k in CARRIED_KEYS if k in carry} if carry else {}
    if user:
        kept.update(user)
    meta: dict[str, Any] = {**kept, "source": source, "step": step} if kept else {"source": source, "step": step}
    if writes is not None:
        meta["writes"] = writes
    lineage = spec.lineage
    if lineage is not None:  # before ``extra``: an edit of an older thread keeps its version
        meta["graph_name"] = lineage.name
        meta["graph_version"] = lineage.version
    meta.update(extra)
    meta["graph"] = graph_fp
    meta["reducers"] = spec.reducer_specs
    if run_id is not None:
        meta["run_id"] = run_id
    return meta
