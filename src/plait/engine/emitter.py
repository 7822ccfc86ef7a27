"""Turning what a run does into the stream items its caller asked for.

A run with no stream pays nothing here: every method returns at its first test when the
caller asked for nothing (``sink`` is None) or not for that mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from plait._sync import on_loop_thread
from plait.checkpoint.model import CheckpointWrite, Task
from plait.engine.events import CheckpointSaved, CustomEvent, Interrupted, NodeFailed, NodeFinished, update_item
from plait.engine.merge import Results
from plait.engine.options import RunHooks
from plait.engine.tasks import TaskOutcome
from plait.state.run_state import StateUpdated

__all__ = ["INTERRUPT_KEY", "Emitter", "NestedSink", "Sink", "queue_sink", "with_hooks"]

INTERRUPT_KEY = "__interrupt__"
"""Key under which ``invoke`` returns, and streams yield, the pending interrupts of a pause."""

Sink = Callable[[str, Any], None]
"""Receives ``(mode, item)`` for the stream modes a caller asked for."""


class Emitter:
    """The stream of one run: ``values``, ``updates``, ``events`` and ``custom`` items."""

    __slots__ = ("active", "events", "loop", "modes", "sink")

    def __init__(self, sink: Sink | None, modes: frozenset[str], loop: asyncio.AbstractEventLoop) -> None:
        self.sink = sink
        self.modes = modes
        self.loop = loop
        self.events = sink is not None and "events" in modes
        """Whether event records are wanted (tested on the hot path before building one)."""
        self.active = sink is not None
        """Whether anything is streamed at all."""

    def event(self, event: Any) -> None:
        if self.events:
            assert self.sink is not None
            self.sink("events", event)

    def values(self, values: Any) -> None:
        """The state after the input or a step (``values`` mode); ``values`` is called only
        when the mode is on, so that no copy is made for nobody."""
        if self.sink is not None and "values" in self.modes:
            self.sink("values", dict(values))

    def custom(self, node: str, step: int, payload: Any) -> None:
        """What a node passed to ``ctx.emit``; from a sync node's worker thread it hops to
        the loop, which owns the sink."""
        if self.sink is None:
            return
        if not on_loop_thread(self.loop):
            self.loop.call_soon_threadsafe(self.custom, node, step, payload)
            return
        if "custom" in self.modes:
            self.sink("custom", payload)
        if self.events:
            self.sink("events", CustomEvent(node=node, step=step, payload=payload))

    def interrupted(self, interrupts: tuple[Any, ...], step: int) -> None:
        """The run paused: ``values`` and ``updates`` streams get ``{"__interrupt__":
        (Interrupt, ...)}`` (empty at a breakpoint), so a UI can prompt without ``get_state``;
        ``events`` an ``Interrupted`` record."""
        if self.sink is None:
            return
        self.event(Interrupted(interrupts=interrupts, step=step))
        for mode in ("values", "updates"):
            if mode in self.modes:
                self.sink(mode, {INTERRUPT_KEY: interrupts})

    def committed(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        """The committer's report: these checkpoints are stored."""
        if self.events:
            assert self.sink is not None
            for cw in checkpoints:
                cp = cw.checkpoint
                self.sink(
                    "events", CheckpointSaved(checkpoint_id=cp.id, step=cp.step, source=str(cp.metadata.get("source")))
                )

    def task_done(self, task: Task, out: TaskOutcome, step: int) -> None:
        if self.sink is None:
            return
        if "updates" in self.modes:
            self.sink("updates", {task.node: update_item(out.writes)})
        if self.events:
            writes: dict[str, list[Any]] = {}
            for k, v in out.writes:
                writes.setdefault(k, []).append(v)
            self.sink("events", NodeFinished(node=task.node, task_id=task.id, step=step, writes=writes))

    def state_updated(self, tasks: Sequence[Task], results: Results, version: int, step: int) -> None:
        """One ``StateUpdated`` event per task that wrote something in the merged step."""
        if not self.events:
            return
        for t in tasks:
            keys = tuple(dict.fromkeys(k for k, _ in results[t.id][0]))
            if keys:
                self.event(StateUpdated(keys=keys, version=version, super_step=step, node=t.node))

    def retry_hook(self, task: Task, step: int) -> Callable[[int, BaseException, bool], None] | None:
        """The callback a task's retries report each failed attempt to (None: no events)."""
        if not self.events:
            return None

        def hook(attempt: int, err: BaseException, will_retry: bool) -> None:
            self.event(
                NodeFailed(
                    node=task.node, task_id=task.id, step=step, error=str(err), attempt=attempt, will_retry=will_retry
                )
            )

        return hook


class NestedSink:
    """A stream sink that tells which graph an item comes from: ``stream(subgraphs=True)``
    yields ``(namespace, item)``, ``namespace`` a tuple of ``node:task_id`` segments (``()``
    for the parent graph), as LangGraph does."""

    __slots__ = ("out", "path")

    def __init__(self, out: Callable[[str, tuple[str, ...], Any], None], path: tuple[str, ...] = ()) -> None:
        self.out = out
        self.path = path

    def __call__(self, mode: str, item: Any) -> None:
        self.out(mode, self.path, item)

    def child(self, segment: str) -> NestedSink:
        return NestedSink(self.out, (*self.path, segment))


def queue_sink(put: Callable[[tuple[str, Any]], None], *, subgraphs: bool, single: bool) -> Callable[[str, Any], None]:
    """The sink of a stream that puts ``(mode, item)`` pairs on a queue: with ``subgraphs``
    the item is ``(namespace, item)`` (``(namespace, (mode, item))`` for several modes)."""
    if not subgraphs:
        return lambda mode, item: put((mode, item))
    return NestedSink(lambda mode, ns, item: put((mode, (ns, item) if single else (ns, (mode, item)))))


def with_hooks(sink: Sink | None, modes: frozenset[str], hooks: RunHooks) -> tuple[Sink, frozenset[str]]:
    """One sink for the caller's stream and the hooks' items: each item goes to whichever
    asked for its mode (both, when both did)."""
    wanted = hooks.modes
    if sink is None:
        return hooks.on_item, wanted
    caller = sink

    def both(mode: str, item: Any) -> None:
        if mode in wanted:
            hooks.on_item(mode, item)
        if mode in modes:
            caller(mode, item)

    return both, modes | wanted
