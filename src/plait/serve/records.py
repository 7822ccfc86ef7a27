"""The server's own records: a thread's metadata, a run of the API, a stored stream event.

The checkpointer keeps a thread's state; what the LangGraph API adds around it (a thread made
before its first run, its metadata, the runs and what they streamed) lives in the server's
run log (:mod:`plait.serve.log`), in the same store. Plain frozen data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "ACTIVE",
    "ApiRunStatus",
    "RunRecord",
    "StoredEvent",
    "ThreadRecord",
]

ApiRunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
"""A run's status as the LangGraph SDKs name it. A run that paused on ``interrupt()`` is
``success`` (its thread is ``interrupted``); ``interrupted`` is a run stopped by a cancel with
``action="interrupt"`` or by a newer run's ``multitask_strategy="interrupt"``."""

ACTIVE: Final[tuple[ApiRunStatus, ...]] = ("pending", "running")


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadRecord:
    thread_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One run of the API. ``kwargs`` holds what the run was asked for, as JSON data (input,
    command, checkpoint, stream modes, context, ...), so that a server started again after
    a crash runs it exactly as asked."""

    run_id: str
    thread_id: str
    assistant_id: str
    graph: str
    status: ApiRunStatus = "pending"
    metadata: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    multitask: str = "enqueue"
    created_at: float = 0.0
    updated_at: float = 0.0
    attempts: int = 0
    output: Any = None
    """The thread's values when it ended, or ``{"__error__": {...}}`` when it failed."""
    error: dict[str, Any] | None = None
    start_checkpoint: str | None = None
    """The thread's head when the run first started (``rollback`` goes back to it)."""
    cancel: str | None = None
    """A cancel asked for and not yet carried out: ``interrupt`` or ``rollback``."""
    temporary: bool = False
    """A stateless run's thread, deleted when the run ends."""

    @property
    def done(self) -> bool:
        return self.status not in ACTIVE


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event of a run's stream as stored: ``seq`` is its SSE id, strictly increasing per
    run across attempts, so a client resuming with ``Last-Event-ID`` misses none and gets none
    twice."""

    seq: int
    event: str
    data: bytes
    """The event's JSON document, encoded once when stored and sent as it is."""
