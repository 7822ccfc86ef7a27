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

__all__ = ["RunInfo", "RunTrace", "TaskTrace", "Tracer", "active", "effect_span"]

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


class Tracer(Protocol):
    """Makes the spans of each run (:class:`plait.tracing.spans.OtelTracer`)."""

    def run(self, info: RunInfo) -> RunTrace: ...


active: Tracer | None = None
"""The tracer of :func:`plait.instrument` (None: runs are not traced, but those of a graph
compiled with ``tracing=True``)."""

_nothing = contextlib.nullcontext()


def effect_span(host: object, name: str, node: str) -> contextlib.AbstractContextManager[Any]:
    """The span of a ``ctx.once`` effect of the run ``host`` (a driver), or a context that
    does nothing when that run is not traced."""
    trace: RunTrace | None = getattr(host, "trace", None)
    return _nothing if trace is None else trace.effect(name, node)
