"""What a run is asked to do, what steers it from outside, and what it returns.

Three records cross the line between the graph facade and the engine, so that a keyword is
spelled out once (in :class:`~plait.graph.compiled.CompiledGraph`'s public signatures) and
travels as data from there on:

- :class:`RunOptions`: the per-call choices (thread, durability, context, ...), built once
  from the public keywords and checked there; a subgraph's run inherits its parent's whole.
- :class:`RunHooks`: how a worker or a server steers a run without touching its store: told
  each stream item it asked for, asked at each super-step boundary whether to stop there.
- :class:`RunResult`: how the run ended.

A stop asked for by the hooks ends the run ``"stopped"``: every committed checkpoint stays,
nothing of the next super-step has started, the lease is given back and the thread left
``ready`` (work to do, no run), which the next run on it continues.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from plait.types import Durability, Interrupt

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.checkpoint.cache import NodeCache
    from plait.checkpoint.model import Checkpoint
    from plait.engine.executor import NodeExecutor
    from plait.store import Store

__all__ = ["Binding", "RunHooks", "RunOptions", "RunResult", "RunOutcome"]

RunOutcome = Literal["done", "interrupted", "stopped"]
"""How a run ended without failing: ran to the end, paused on an interrupt or a breakpoint,
or stopped at a super-step boundary because its :class:`RunHooks` asked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """The choices of one call of ``invoke``/``stream`` (see ``CompiledGraph.ainvoke`` for
    what each means), checked when built. Frozen, so that a subgraph's run can share its
    parent's record and no step of a run can change what the run was asked for."""

    thread_id: str | None = None
    checkpoint_id: str | None = None
    recursion_limit: int = 10_000
    durability: Durability = "sync"
    wait: float | None = None
    owner: str | None = None
    context: Any = None
    metadata: Mapping[str, Any] | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.durability not in ("sync", "async", "exit"):
            raise ValueError(f"durability must be 'sync', 'async' or 'exit', got {self.durability!r}")
        if self.recursion_limit < 1:
            raise ValueError("recursion_limit must be at least 1")
        if self.wait is not None and self.wait < 0:
            raise ValueError("wait must be a number of seconds (0 or more), or None not to wait")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1 (or None for no cap)")
        if self.metadata is not None and not isinstance(self.metadata, MappingProxyType):
            # a copy the caller cannot change under the run (it is recorded on every checkpoint)
            object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)) if self.metadata else None)


class RunHooks:
    """How a run is steered from outside (a worker, a server), as Temporal's workers use
    interceptors: subclass and override what you need. The defaults do nothing, so a run with
    hooks behaves as one without until a hook says otherwise.

    Only the top-level run calls them (a subgraph's run is a part of its parent's task), on
    the event loop of the run.
    """

    modes: frozenset[str] = frozenset()
    """The stream modes :meth:`on_item` is given (``"values"``, ``"updates"``, ``"events"``,
    ``"custom"``, ``"messages"``: ``on_item("messages", (chunk, metadata))`` for each chunk a
    node streams, as ``stream(mode="messages")`` yields it); none by default, so that the run
    builds no stream item for nobody."""

    subgraphs: bool = False
    """Whether the items of :attr:`modes` made by the run's subgraphs are given too, to
    :meth:`on_subgraph_item` (off by default: a subgraph's items are built for nobody)."""

    root: bool = False
    """Whether a run given input on a thread with no checkpoint stores the thread's root
    first: a checkpoint of the schema's defaults (source ``"update"``, as ``update_state(t,
    {})`` makes it), committed with the input's in one transaction. The state that holds
    the input then has a parent to branch from (the LangGraph API's step -1: a chat UI edits
    a first message by running from there); ``plait serve`` asks for it. With durability
    ``"exit"`` it is folded away like every checkpoint the run's end does not need."""

    trace_links: tuple[Mapping[str, str], ...] = ()
    """Spans the run's span links to when the run is traced (each ``{"trace_id", "span_id"}``,
    hex): a queued run's earlier attempt, whose worker may have died before exporting it."""

    async def on_trace(self, stamp: Mapping[str, str]) -> None:
        """The ids of the run's span (``{"trace_id", "span_id"}``, hex), when the run is traced
        and has a thread: awaited as the span starts (after :meth:`on_start`, before the first
        step), so that a host can store them with the run, where the next attempt finds them."""

    async def on_start(self, head: Checkpoint | None, input: Any) -> Any:
        """Called once the run holds its thread (its lease taken) and has read the checkpoint
        it starts from (``head``; None on a new thread), before anything is written: returns
        the input the run goes on with (``input`` by default). A queued run decides here,
        under the lease, whether its input already landed (an earlier attempt committed it)
        or is still to apply, with no read of the head of its own."""
        return input

    def on_item(self, mode: str, item: Any) -> None:
        """A stream item of one of :attr:`modes`, as ``stream()`` would yield it (the run's
        own items; a subgraph's go to :meth:`on_subgraph_item`). Must not block: it runs on
        the loop."""

    def on_subgraph_item(self, namespace: tuple[str, ...], mode: str, item: Any) -> None:
        """A stream item of one of :attr:`modes` made by a subgraph of the run, when
        :attr:`subgraphs` is on: ``namespace`` says which, as ``stream(subgraphs=True)``
        yields it (the ``node:task_id`` segments from the top-level run). Must not block."""

    async def at_step(self, checkpoint: Checkpoint) -> bool:
        """Called at each super-step boundary, after ``checkpoint`` (the last one the run
        stored) and before the next super-step starts; True stops the run there (it ends
        ``"stopped"``, once that checkpoint is committed). With ``durability="sync"`` the
        checkpoint is committed when this is called. Store what was streamed so far here, if
        anything."""
        return False

    def on_finish(self, result: RunResult) -> None:
        """How the run ended, when it did not fail (a failure is raised to the caller):
        ``result.status`` tells a pause on a breakpoint (no interrupts) from the end."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """Where a compiled graph's runs store their threads and what steers them: every option
    of a ``CompiledGraph`` but its spec and name, in one record, so that rebinding a graph
    (``CompiledGraph.bind``: a worker's own checkpointer, a server's namespace) can keep
    every option without naming each."""

    checkpointer: Checkpointer | None = None
    namespace: str = ""
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    executor: NodeExecutor | None = None
    """Where sync nodes run (None: the process's shared thread pool)."""
    hooks: RunHooks | None = None
    store: Store | None = None
    """The memory store nodes reach as ``ctx.store`` (None: none)."""
    tracing: bool = False
    """Trace the runs (OpenTelemetry, the global provider) even while ``plait.instrument()``
    is off: ``compile(tracing=True)``."""
    cache: NodeCache | None = None
    """Where nodes with a ``cache_policy`` keep their results (``compile(cache=...)``); a
    subgraph's nodes use the cache of the run that runs them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    values: dict[str, Any]
    interrupts: tuple[Interrupt, ...]
    status: RunOutcome
    checkpoint_id: str | None
    step: int
