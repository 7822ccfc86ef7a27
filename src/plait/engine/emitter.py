"""Turning what a run does into the stream items its caller asked for.

A run with no stream pays nothing here: every method returns at its first test when the
caller asked for nothing (``sink`` is None) or not for that mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from plait._sync import on_loop_thread
from plait.checkpoint.model import CheckpointWrite, Task
from plait.engine.events import CheckpointSaved, CustomEvent, Interrupted, NodeFailed, NodeFinished, update_item
from plait.engine.merge import Results
from plait.engine.tasks import TaskOutcome
from plait.state.messages import as_langchain, kind_of
from plait.state.run_state import StateUpdated

__all__ = ["INTERRUPT_KEY", "Emitter", "MessageSource", "NestedSink", "Sink", "queue_sink", "with_hooks"]

INTERRUPT_KEY = "__interrupt__"
"""Key under which ``invoke`` returns, and streams yield, the pending interrupts of a pause."""

Sink = Callable[[str, Any], None]
"""Receives ``(mode, item)`` for the stream modes a caller asked for."""


class MessageSource:
    """Where a run's ``messages`` items come from, for their metadata (LangGraph's keys, and
    plait's own), and which channels hold messages a node may write whole."""

    __slots__ = ("base", "keys", "namespace", "path")

    def __init__(
        self,
        *,
        thread_id: str | None,
        namespace: str,
        path: tuple[str, ...],
        metadata: Mapping[str, Any] | None,
        keys: frozenset[str],
    ) -> None:
        self.base = {**(metadata or {}), "thread_id": thread_id}
        """The run's metadata (``invoke(metadata=...)``, as LangGraph puts its config's), then
        the thread."""
        self.namespace = namespace
        self.path = path
        """The ``node:task_id`` segments from the top-level run to this one (``()`` there)."""
        self.keys = keys
        """The channels merged by AppendMessages."""

    def metadata(self, node: str, step: int, task_id: str) -> dict[str, Any]:
        """The metadata of a task's ``messages`` items. ``langgraph_checkpoint_ns`` is the
        task's own namespace as LangGraph spells it: the segments of the graphs above it and
        its own ``node:task_id``, joined by ``|`` (``"agent:<task id>"`` in a top-level graph)."""
        return {
            **self.base,
            "langgraph_node": node,
            "langgraph_step": step,
            "langgraph_checkpoint_ns": "|".join((*self.path, f"{node}:{task_id}")),
            "plait_task_id": task_id,
            "plait_namespace": self.namespace,
        }


class Emitter:
    """The stream of one run: ``values``, ``updates``, ``events``, ``custom`` and
    ``messages`` items."""

    __slots__ = ("active", "events", "loop", "messages", "modes", "seen", "sink", "source", "streamed")

    def __init__(
        self,
        sink: Sink | None,
        modes: frozenset[str],
        loop: asyncio.AbstractEventLoop,
        source: MessageSource | None = None,
    ) -> None:
        self.sink = sink
        self.modes = modes
        self.loop = loop
        self.events = sink is not None and "events" in modes
        """Whether event records are wanted (tested on the hot path before building one)."""
        self.active = sink is not None
        """Whether anything is streamed at all."""
        self.messages = sink is not None and "messages" in modes and source is not None
        """Whether ``messages`` items are wanted: when not, a streamed message is only added up."""
        self.source = source
        self.seen: set[str] = set()
        """The ids of the messages sent so far, streamed or whole, by this run or its
        subgraphs' (shared with them, see :meth:`share`): a message is sent whole only if
        it was not sent yet, as LangGraph does."""
        self.streamed = False
        """Whether a task streamed a message since :meth:`hand_over` last looked."""

    async def hand_over(self) -> None:
        """Give the stream's reader a turn of the loop if a task streamed a message since
        the last call: the loop calls this before a step's commit, so that a server stores
        the answer's chunks ahead of the commit (which holds the store's file for its fsync)
        and its client sees them that much sooner."""
        if self.streamed:
            self.streamed = False
            await asyncio.sleep(0)

    def share(self, parent: Emitter) -> None:
        """Be a subgraph's stream of the run ``parent`` streams: a message sent by either is
        not sent whole again by the other (a subgraph's answer, streamed inside it, is the
        parent task's write too)."""
        self.seen = parent.seen

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

    def update(self, name: str, payload: Any) -> None:
        """An ``updates`` item ``{name: payload}`` that is no node's writes: a ``plait.task``
        call's result, as LangGraph streams a task's (on the loop, which owns the sink)."""
        if self.sink is not None and "updates" in self.modes:
            self.sink("updates", {name: payload})

    def message_sink(self, node: str, step: int, task_id: str, message_id: str) -> Callable[[Any], None] | None:
        """Where the chunks of message ``message_id``, streamed by a task, go as ``(chunk,
        metadata)`` items (None: nobody asked for ``messages``). Callable from the task's
        worker thread: the item then hops to the loop, which owns the sink, in order."""
        if not self.messages:
            return None
        assert self.sink is not None and self.source is not None
        self.seen.add(message_id)
        self.streamed = True
        meta = self.source.metadata(node, step, task_id)
        sink, loop = self.sink, self.loop

        def put(chunk: Any) -> None:
            if on_loop_thread(loop):
                sink("messages", (chunk, meta))
            else:
                loop.call_soon_threadsafe(sink, "messages", (chunk, meta))

        return put

    def _written_messages(self, task: Task, out: TaskOutcome, step: int) -> None:
        """The messages a task wrote to a messages channel and did not stream, each whole as
        one ``messages`` item in LangChain's shape (as LangGraph streams the messages a node
        returns): a tool's answer reaches a chat as it is written."""
        assert self.sink is not None and self.source is not None
        seen = self.seen
        meta: dict[str, Any] | None = None
        for key, value in out.writes:
            if key not in self.source.keys:
                continue
            for msg in value if isinstance(value, list | tuple) else (value,):
                if isinstance(msg, Mapping) and msg.get("id") not in seen and kind_of(msg) is not None:
                    seen.add(msg["id"])
                    if meta is None:
                        meta = self.source.metadata(task.node, step, task.id)
                    self.sink("messages", (as_langchain(msg), meta))

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
        if self.messages:
            self._written_messages(task, out, step)
        if "updates" in self.modes:
            item: dict[str, Any] = {task.node: update_item(out.writes)}
            if out.cached:  # LangGraph's marker of a result read from the node cache
                item["__metadata__"] = {"cached": True}
            self.sink("updates", item)
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
    the item is ``(namespace, item)`` (``(namespace, mode, item)`` for several modes, as
    LangGraph yields them)."""
    if not subgraphs:
        return lambda mode, item: put((mode, item))
    return NestedSink(lambda mode, ns, item: put((mode, (ns, item) if single else (ns, mode, item))))


def with_hooks(
    sink: Sink | None, modes: frozenset[str], hook: Sink, wanted: frozenset[str]
) -> tuple[Sink, frozenset[str]]:
    """One sink for the caller's stream and a hook's items (``wanted`` modes): each item goes
    to whichever asked for its mode (both, when both did)."""
    if sink is None:
        return hook, wanted
    caller = sink

    def both(mode: str, item: Any) -> None:
        if mode in wanted:
            hook(mode, item)
        if mode in modes:
            caller(mode, item)

    return both, modes | wanted
