"""The one switch the engine reads: which tracer, if any, traces runs.

Kept apart from the OpenTelemetry code (:mod:`plait.tracing.spans`) so that the engine can
read it without importing OpenTelemetry: with nothing instrumented, :data:`active` is None
and a run pays one attribute read per run, step and task, nothing more.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

__all__ = [
    "RunInfo",
    "RunTrace",
    "TaskTrace",
    "Tracer",
    "active",
    "chat_span",
    "effect_span",
    "graph_tracer",
    "operation",
]

_T = TypeVar("_T")


class TaskTrace(Protocol):
    """The spans of one task: one per attempt its retry policy makes."""

    def attempt(self, attempt: int) -> None: ...

    def chain(
        self, other: Callable[[int, BaseException, bool], None] | None
    ) -> Callable[[int, BaseException, bool], None]: ...

    async def run(self, outcome: Awaitable[_T]) -> _T: ...


class RunTrace(Protocol):
    """The spans of one run (an invocation, or a subgraph's run inside a task)."""

    stamp: Mapping[str, str] | None
    """What the run's checkpoints carry as their ``trace`` metadata (None: nothing), so that
    the run resuming a paused thread can link to this one."""

    async def step(self, step: int, checkpoint_id: str, work: Awaitable[_T]) -> _T: ...

    def task(self, node: str, task_id: str, step: int) -> TaskTrace: ...

    def committed(self, checkpoints: Sequence[Any]) -> None: ...

    def interrupted(self, interrupts: Sequence[Any], checkpoint_id: str) -> None: ...

    def finished(self, status: str, checkpoint_id: str | None, step: int) -> None: ...

    def failed(self, error: BaseException) -> None: ...

    def effect(self, name: str, node: str) -> contextlib.AbstractContextManager[Any]: ...

    def chat(
        self, node: str, message_id: str
    ) -> contextlib.AbstractContextManager[Callable[[Mapping[str, Any]], None]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """What a run's span says of it, given by the engine when the run starts."""

    thread_id: str | None
    namespace: str
    run_id: str
    durability: str
    graph: str
    """The compiled graph's name ("": a subgraph's run)."""
    top: bool
    """A top-level run (not a subgraph's): its checkpoints name its span, and it links."""
    link: Any
    """The ``trace`` metadata of the checkpoint a resumed run continues (None: no link)."""
    resumed: bool
    benign: tuple[type[BaseException], ...]
    """What ends a step without failing it (a pause, a stop asked for by the run's hooks)."""
    retries: tuple[Mapping[str, str], ...] = ()
    """The spans of a queued run's earlier attempts (its hooks' ``trace_links``), linked to."""
    start_from: str | None = None
    """The checkpoint a run was told to start from (``invoke(checkpoint_id=...)``): a replay
    (no input) or a new branch (with input)."""
    replay: bool = False
    version: int | None = None
    """The graph's version (``compile(version=...)``; None: unversioned)."""
    lease: tuple[str, int] | None = None
    """The owner and token of the lease the run holds its thread by (None: no lease)."""


class Tracer(Protocol):
    """Makes the spans of each run (:class:`plait.tracing.spans.OtelTracer`)."""

    def run(self, info: RunInfo) -> RunTrace: ...

    def operation(
        self, name: str, attributes: Mapping[str, Any]
    ) -> contextlib.AbstractContextManager[Callable[[str], None]]: ...


active: Tracer | None = None
"""The tracer of :func:`plait.instrument` (None: runs are not traced, but those of a graph
compiled with ``tracing=True``)."""

_nothing = contextlib.nullcontext()


def effect_span(host: object, name: str, node: str) -> contextlib.AbstractContextManager[Any]:
    """The span of a ``ctx.once`` effect of the run ``host`` (a driver), or a context that
    does nothing when that run is not traced."""
    trace: RunTrace | None = getattr(host, "trace", None)
    return _nothing if trace is None else trace.effect(name, node)


def chat_span(host: object, node: str, message_id: str) -> contextlib.AbstractContextManager[Any]:
    """The span of a model's answer streamed through ``ctx.stream_message`` in the run ``host``
    (a driver): it yields what to call with the finished message (its model, finish reason
    and token counts become the span's ``gen_ai.*`` attributes), or None when the run is
    not traced."""
    trace: RunTrace | None = getattr(host, "trace", None)
    return _nothing if trace is None else trace.chat(node, message_id)


def operation(tracing: bool, name: str, attributes: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """The span of a change to a thread made outside any run (``update_state``: ``plait.update``,
    ``fork``: ``plait.fork``), when :func:`plait.instrument` is on or the graph was compiled
    with ``tracing``: it yields what to call with the checkpoint the change made, or None."""
    tracer = active
    if tracer is None:
        if not tracing:
            return _nothing
        tracer = graph_tracer()
    return tracer.operation(name, attributes)


_global: Tracer | None = None


def graph_tracer() -> Tracer:
    """The tracer of the graphs compiled with ``tracing=True``, for their runs while
    :func:`plait.instrument` is off: the global tracer provider's (no log correlation)."""
    global _global
    if _global is None:
        from plait.tracing import spans

        _global = spans.OtelTracer(None)
    return _global
