"""What the inspection API returns: a thread's state at one checkpoint, and thread diffs."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plait._codec import fingerprint
from plait._fast_init import positional_maker
from plait.checkpoint.model import Checkpoint, PendingWrite, Status, Task
from plait.engine.pending import active_interrupts
from plait.state.diff import StateDiff, diff
from plait.types import Interrupt

__all__ = ["TaskError", "ThreadDiff", "ThreadState"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskError:
    """Why a task of a thread's next step failed, as stored with the checkpoint it started
    from (so a thread keeps its error after the process that saw it is gone)."""

    task_id: str
    """The failed task (empty for a failure of the step itself, such as its merge)."""
    node: str | None
    step: int
    error: str
    """plait's error class (``NodeError``, ``NodeTimeoutError``, ``ConcurrentWriteError``, ...)."""
    type: str
    """The qualified type of the exception the node raised (``builtins.ValueError``)."""
    message: str
    traceback: str
    """The formatted traceback of that exception (its last 16,000 characters)."""

    @classmethod
    def of(cls, write: PendingWrite) -> TaskError:
        v = write.value if isinstance(write.value, Mapping) else {}
        node, step = v.get("node"), v.get("step")
        return cls(
            task_id=write.task_id,
            node=node if isinstance(node, str) else None,
            step=step if isinstance(step, int) else 0,
            error=str(v.get("error", "")),
            type=str(v.get("type", "")),
            message=str(v.get("message", "")),
            traceback=str(v.get("traceback", "")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "node": self.node,
            "step": self.step,
            "error": self.error,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadState:
    """A thread's state at one checkpoint, as ``get_state`` and the history return it."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    parent_id: str | None
    step: int
    values: Mapping[str, Any]
    """Channel values (read-only; plait.thaw() gives a mutable copy)."""
    next: tuple[str, ...]
    """The nodes that run next; empty when the run is finished."""
    tasks: tuple[Task, ...]
    interrupts: tuple[Interrupt, ...]
    """Interrupts waiting for ``Command(resume=...)``."""
    metadata: Mapping[str, Any]
    created_at: float
    errors: tuple[TaskError, ...] = ()
    """The failures stored with this checkpoint: tasks of its next step that failed."""
    status: Status | None = None
    """How the thread stands (``get_state`` fills it in; None in a history)."""

    @property
    def error(self) -> TaskError | None:
        """The first stored failure (None: no task of the next step failed)."""
        return self.errors[0] if self.errors else None

    @property
    def fingerprint(self) -> str:
        """Hash of the canonical JSON of ``values`` (computed when asked for)."""
        return fingerprint(self.values)

    @property
    def source(self) -> str:
        return str(self.metadata.get("source", ""))

    @property
    def created(self) -> str:
        """``created_at`` as an ISO 8601 UTC time."""
        return datetime.datetime.fromtimestamp(self.created_at, datetime.UTC).isoformat()

    @classmethod
    def of(cls, cp: Checkpoint, status: Status | None = None) -> ThreadState:
        pending = cp.pending_writes
        return _thread_state(
            cp.thread_id,
            cp.namespace,
            cp.id,
            cp.parent_id,
            cp.step,
            cp.values,
            _nodes(cp.next_tasks),
            cp.next_tasks,
            tuple(active_interrupts(pending)) if pending else (),
            cp.metadata,
            cp.created_at,
            tuple(TaskError.of(w) for w in pending if w.kind == "error") if pending else (),
            status,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "namespace": self.namespace,
            "checkpoint_id": self.checkpoint_id,
            "parent_id": self.parent_id,
            "step": self.step,
            "values": self.values,
            "next": list(self.next),
            "interrupts": [i.to_json() for i in self.interrupts],
            "metadata": self.metadata,
            "created_at": self.created,
            "status": self.status,
            "errors": [e.to_json() for e in self.errors],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadDiff:
    """Where two threads (or two checkpoints' lineages) part ways."""

    first_step: int | None
    """The first step at which their states differ (None: they never do)."""
    keys: tuple[str, ...]
    """The keys that differ at that step."""
    a: ThreadState | None
    """The first thread's checkpoint at that step (None when they never differ)."""
    b: ThreadState | None
    """The second thread's checkpoint at that step (None when they never differ)."""
    heads: StateDiff
    """The difference between the two heads."""

    def __bool__(self) -> bool:
        return self.first_step is not None or bool(self.heads)

    @classmethod
    def between(cls, ha: Sequence[Checkpoint], hb: Sequence[Checkpoint]) -> ThreadDiff:
        """The diff of two non-empty lineages, each oldest first."""
        by_step_a = {cp.step: cp for cp in ha}
        by_step_b = {cp.step: cp for cp in hb}
        first: int | None = None
        keys: tuple[str, ...] = ()
        pa = pb = None
        for step in sorted(set(by_step_a) & set(by_step_b)):
            d = diff(by_step_a[step].values, by_step_b[step].values)
            if d:
                first, keys = step, d.keys
                pa, pb = ThreadState.of(by_step_a[step]), ThreadState.of(by_step_b[step])
                break
        heads = diff(ha[-1].values, hb[-1].values)
        if first is None and heads:
            first, keys = max(ha[-1].step, hb[-1].step), heads.keys
            pa, pb = ThreadState.of(ha[-1]), ThreadState.of(hb[-1])
        return cls(first_step=first, keys=keys, a=pa, b=pb, heads=heads)


_thread_state = positional_maker(ThreadState)
"""``ThreadState(...)`` with every field, in order: a history builds one per checkpoint."""


def _nodes(tasks: tuple[Task, ...]) -> tuple[str, ...]:
    """The nodes of ``tasks``, each once, in order (a history builds one per checkpoint, and
    most checkpoints plan zero or one task)."""
    if len(tasks) < 2:
        return (tasks[0].node,) if tasks else ()
    return tuple(dict.fromkeys(t.node for t in tasks))
