"""What the inspection API returns: a thread's state at one checkpoint (a thread diff,
:class:`plait.inspect.ThreadDiff`, holds one for each side)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from plait._codec import fingerprint
from plait._fast_init import positional_maker
from plait.checkpoint.model import Checkpoint, PendingWrite, Status, Task, waiting_interrupts
from plait.engine.events import update_item
from plait.types import Interrupt

__all__ = ["TaskError", "TaskState", "ThreadState"]


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
class TaskState:
    """One task of a thread's next step, and how far it got: a step stopped by a failure or
    an interrupt keeps its finished tasks' writes (they are not run again on resume)."""

    id: str
    node: str
    send: bool = False
    """True for a task made by a ``Send``; its input is then ``arg``."""
    arg: Any = None
    status: Literal["pending", "done", "failed", "interrupted"] = "pending"
    result: dict[str, Any] | list[dict[str, Any]] | None = None
    """A finished task's saved writes (as a ``stream(mode="updates")`` item shows them)."""
    error: TaskError | None = None
    """Why the task failed (``status == "failed"``)."""
    interrupts: tuple[Interrupt, ...] = ()
    """The interrupts it waits on (``status == "interrupted"``)."""


def _task_states(
    tasks: tuple[Task, ...], pending: tuple[PendingWrite, ...], interrupts: tuple[Interrupt, ...]
) -> tuple[TaskState, ...]:
    """The next step's tasks, each with what the checkpoint's pending writes say of it."""
    if not pending:  # a history's usual checkpoint: every task pending, built without __init__
        if len(tasks) == 1:
            t = tasks[0]
            return (_task_state(t.id, t.node, t.send, t.arg, "pending", None, None, ()),)
        return tuple(_task_state(t.id, t.node, t.send, t.arg, "pending", None, None, ()) for t in tasks)
    results = {w.task_id: w.value for w in pending if w.kind == "result"}
    errors = {w.task_id: TaskError.of(w) for w in pending if w.kind == "error"}
    out = []
    for t in tasks:
        waits = tuple(i for i in interrupts if i.task_id == t.id)
        if t.id in results:
            r = results[t.id]
            done = TaskState(id=t.id, node=t.node, send=t.send, arg=t.arg, status="done", result=update_item(r["w"]))
            out.append(done)
        elif t.id in errors:
            out.append(TaskState(id=t.id, node=t.node, send=t.send, arg=t.arg, status="failed", error=errors[t.id]))
        elif waits:
            out.append(TaskState(id=t.id, node=t.node, send=t.send, arg=t.arg, status="interrupted", interrupts=waits))
        else:
            out.append(TaskState(id=t.id, node=t.node, send=t.send, arg=t.arg))
    return tuple(out)


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
    """The nodes that run next; empty when the run is finished. A task of the step that
    already finished (its writes saved, see :attr:`tasks`) is not among them."""
    tasks: tuple[TaskState, ...]
    """The next step's tasks, with what each got to: done (its saved writes), failed (and
    why), interrupted (on what), or pending."""
    interrupts: tuple[Interrupt, ...]
    """Interrupts waiting for ``Command(resume=...)``."""
    metadata: Mapping[str, Any]
    created_at: float
    errors: tuple[TaskError, ...] = ()
    """The failures stored with this checkpoint: tasks of its next step that failed."""
    status: Status | None = None
    """How the thread stands (``get_state`` fills it in; None in a history)."""
    subgraphs: Mapping[str, ThreadState] | None = None
    """With ``get_state(..., subgraphs=True)``: the state of each subgraph a task of the
    next step runs (an interrupted or unfinished one), by ``"node:task_id"``, nested the
    same way (None: not asked for)."""

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
        interrupts = tuple(waiting_interrupts(pending)) if pending else ()
        tasks = _task_states(cp.next_tasks, pending, interrupts)
        return _thread_state(
            cp.thread_id,
            cp.namespace,
            cp.id,
            cp.parent_id,
            cp.step,
            cp.values,
            _nodes(tasks if not pending or _step_failed(pending) else tuple(t for t in tasks if t.status != "done")),
            tasks,
            interrupts,
            cp.metadata,
            cp.created_at,
            tuple(TaskError.of(w) for w in pending if w.kind == "error") if pending else (),
            status,
            None,
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
            **({} if self.subgraphs is None else {"subgraphs": {k: v.to_json() for k, v in self.subgraphs.items()}}),
        }


_task_state = positional_maker(TaskState)
"""``TaskState(...)`` with every field, in order: a history builds one per task of each checkpoint."""

_thread_state = positional_maker(ThreadState)
"""``ThreadState(...)`` with every field, in order: a history builds one per checkpoint."""


def _step_failed(pending: tuple[PendingWrite, ...]) -> bool:
    """Whether the step itself failed (its merge, the recursion limit): then its finished
    tasks are not past, and every task stays in ``next``."""
    return any(w.kind == "error" and not w.task_id for w in pending)


def _nodes(tasks: tuple[TaskState, ...]) -> tuple[str, ...]:
    """The nodes of ``tasks``, each once, in order (a history builds one per checkpoint, and
    most checkpoints plan zero or one task)."""
    if len(tasks) < 2:
        return (tasks[0].node,) if tasks else ()
    return tuple(dict.fromkeys(t.node for t in tasks))
