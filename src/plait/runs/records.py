"""The records of the run model: a run, a schedule, their statuses and the multitask strategies.

Plain frozen data read back from plait's runs tables; nothing here talks to the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "ACTIVE",
    "FINAL",
    "MULTITASK",
    "RUN_STATUSES",
    "Multitask",
    "Run",
    "RunStatus",
    "Schedule",
]

RunStatus = Literal["pending", "running", "interrupted", "success", "error", "cancelled", "timeout"]
"""How a run stands: ``pending`` (queued, or waiting for its ``after`` time, a free slot or its
thread), ``running`` (a worker runs it), and once it ended: ``interrupted`` (paused by
``interrupt()`` for input, or stopped by a newer run's ``multitask="interrupt"``/``"rollback"``),
``success``, ``error`` (a node failed, or the graph changed; :attr:`Run.error` says how),
``cancelled`` and ``timeout`` (it ran past its ``timeout``)."""

RUN_STATUSES: Final[tuple[RunStatus, ...]] = (
    "pending",
    "running",
    "interrupted",
    "success",
    "error",
    "cancelled",
    "timeout",
)
ACTIVE: Final[tuple[RunStatus, ...]] = ("pending", "running")
"""The statuses of a run that has not ended: a thread with such a run is busy."""
FINAL: Final[tuple[RunStatus, ...]] = ("interrupted", "success", "error", "cancelled", "timeout")

Multitask = Literal["reject", "enqueue", "interrupt", "rollback"]
"""What ``submit`` does when the thread already has an active run (double-texting):
``reject`` refuses the new run (:class:`~plait.errors.RunRejectedError`); ``enqueue`` runs it
after the others, one at a time; ``interrupt`` stops the active runs at their next super-step
boundary (their checkpoints stay) and the new run goes on from there; ``rollback`` does the
same and then discards the checkpoints the stopped runs made."""
MULTITASK: Final[tuple[Multitask, ...]] = ("reject", "enqueue", "interrupt", "rollback")


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One run of a graph on a thread, as stored by plait."""

    run_id: str
    graph: str
    """The name workers know the graph by (``pkg.module:graph`` or ``file.py:graph``)."""
    thread_id: str
    namespace: str = ""
    status: RunStatus
    multitask: Multitask = "enqueue"
    input: Any = None
    """The channel values the run starts with (None: continue the thread)."""
    resume: Any = None
    """With :attr:`has_resume`, the value that answers the thread's pending ``interrupt()``."""
    has_resume: bool = False
    context: Any = None
    """JSON data given to the run's nodes' worker (stored with the run, for the application)."""
    metadata: Any = None
    priority: int = 0
    queue: str = "plait"
    timeout: float | None = None
    """Seconds the run may take once started; past them it ends ``timeout``."""
    attempts: int = 0
    """How many times a worker started it (more than one: it was resumed after a crash, a
    shutdown or a busy thread)."""
    worker: str | None = None
    """The lease owner of its latest attempt: which worker ran it."""
    output: Any = None
    """The channel values when it ended (with ``__interrupt__`` when paused for input)."""
    error: Any = None
    """How it failed: ``{"type": ..., "message": ...}`` (None unless ``error``/``timeout``,
    or why it was interrupted or cancelled)."""
    start_checkpoint: str | None = None
    """The thread's head when it first started (None: a new thread); ``rollback`` goes back to it."""
    schedule_id: str | None = None
    tick: int | None = None
    """For a scheduled run: the cron tick (unix seconds) it was fired for."""
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    updated_at: float = 0.0
    options: Any = None
    """What the run was asked beyond its input (JSON data; None: nothing): ``update`` and
    ``goto`` of a ``Command``, ``checkpoint_id`` to start from, ``interrupt_before`` /
    ``interrupt_after``, ``durability``, ``recursion_limit``, ``wire`` (the stream stored
    as the LangGraph API's events, for ``plait serve``), and ``trace`` (the submitter's W3C
    trace context, which a tracing worker's spans continue)."""
    trace: dict[str, str] | None = None
    """The ``plait.run`` span of the run's latest traced attempt (``{"trace_id", "span_id"}``,
    hex; None: no attempt was traced), stored before the attempt's first step: there even when
    its worker died before exporting it."""

    @property
    def done(self) -> bool:
        """Whether the run ended (any status but pending and running)."""
        return self.status in FINAL

    def to_json(self) -> dict[str, Any]:
        """The run as JSON data (what ``plait runs --json`` prints)."""
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A cron schedule that submits a run of a graph at each tick, exactly once per tick."""

    schedule_id: str
    graph: str
    cron: str
    """Five fields (minute hour day month weekday), or six with seconds last."""
    input: Any = None
    thread_id: str | None = None
    """The thread every tick's run goes to (one after another); None: a new thread per tick,
    ``<schedule_id>:<tick>``."""
    namespace: str = ""
    multitask: Multitask = "enqueue"
    metadata: Any = field(default=None)
    last_tick: int | None = None
    """The latest tick a run was submitted for (unix seconds)."""
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}
