"""What a running node can reach: its NodeContext, ``interrupt()`` and the effects ledger.

``interrupt()`` finds the task it runs in through a context variable, so it works from any
depth of the node's call stack, in sync nodes (run in worker threads with the context
copied) and async ones alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import inspect
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from plait._codec import freeze
from plait._fast_init import given_maker
from plait._sync import on_loop_thread
from plait.engine.task_store import TaskStore
from plait.errors import MessageChunkError, NoCheckpointerError, NoStoreError, PlaitError, SyncCallOnLoopError
from plait.state.messages import MessageBuilder, chunk_item, read_chunk
from plait.state.reducers import message_id
from plait.store import MemoryWrite, Store
from plait.tracing.hooks import chat_span, effect_span
from plait.types import Command, Interrupt

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.checkpoint.model import Checkpoint, Fence
    from plait.engine.options import RunResult
    from plait.engine.spec import SubgraphRunner

__all__ = [
    "ChildRun",
    "GraphInterrupt",
    "NodeContext",
    "ParentCommand",
    "SubgraphScope",
    "TaskCalls",
    "TaskHost",
    "current_node",
    "interrupt",
    "next_subgraph_call",
    "node_context",
    "restart",
]


class GraphInterrupt(BaseException):
    """Raised by :func:`interrupt` to pause the run.

    A ``BaseException`` (like ``asyncio.CancelledError``) so that a node's
    ``except Exception`` cannot swallow the pause; users never need to catch it.
    """

    def __init__(self, interrupt: Interrupt) -> None:
        super().__init__(interrupt)
        self.interrupt = interrupt


class ParentCommand(BaseException):
    """Carries a node's ``Command(graph=Command.PARENT, ...)`` out of its subgraph's run to
    the task of the enclosing graph that runs the subgraph, which takes it as its own
    ``Command(update=..., goto=...)``.

    A ``BaseException`` for the reason :class:`GraphInterrupt` is one: a node that calls a
    subgraph inside ``try/except Exception`` must not swallow the hand-off.
    """

    def __init__(self, command: Command) -> None:
        super().__init__(command)
        self.command = command


class BorrowableLease(Protocol):
    """What a subgraph's run may do with its parent's lease: check it, never renew or free it."""

    @property
    def error(self) -> BaseException | None: ...

    def check(self) -> None: ...

    async def confirm(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SubgraphScope:
    """Where a subgraph of a durable run stores its steps: the parent's thread, under the
    parent's lease, every commit fenced by the parent's token."""

    checkpointer: Checkpointer
    thread_id: str
    lease: BorrowableLease
    fence: Fence


class ChildRun(Protocol):
    """A subgraph's run, as its parent's task drives it."""

    namespace: str
    """The child namespace its checkpoints are stored in."""

    async def execute(self, input: Any) -> RunResult: ...

    async def execute_inside(self, input: Any, head: Checkpoint | None, hold: Any, fence: Fence) -> RunResult: ...


class TaskCalls(Protocol):
    """What the engine asks of a task attempt's ``plait.task`` calls (see :mod:`plait.func`)."""

    async def settle(self) -> None:
        """Wait until every call still running has ended (each records its own result)."""
        ...


class TaskHost(Protocol):
    """The part of the loop a context (and a subgraph the task runs) talks to."""

    loop: asyncio.AbstractEventLoop
    durable: bool

    def emit_custom(self, node: str, step: int, payload: Any) -> None: ...

    def emit_update(self, name: str, payload: Any) -> None:
        """An ``updates`` stream item ``{name: payload}`` (a ``plait.task`` call's result)."""
        ...

    def message_sink(self, node: str, step: int, task_id: str, message_id: str) -> Callable[[Any], None] | None:
        """Where a streamed message's chunk items go (None: nobody streams ``messages``)."""
        ...

    async def confirm_lease(self) -> None: ...

    def unsettled_memory(self) -> list[MemoryWrite]:
        """The memory writes of the run's earlier steps that are not committed yet."""
        ...

    async def record_effect(self, task_id: str, name: str, value: Any) -> None: ...

    def subgraph_run(self, sub: SubgraphRunner, segment: str) -> ChildRun: ...

    async def subgraph_scope(self) -> SubgraphScope | None: ...


@dataclass(kw_only=True)
class NodeContext:
    """Given to a node that takes a second argument: where it runs and what it may do."""

    thread_id: str | None
    namespace: str
    checkpoint_id: str
    """The checkpoint this super-step started from."""
    step: int
    node: str
    task_id: str
    host: TaskHost = field(repr=False)
    context: Any = field(default=None, repr=False)
    """The run's ``invoke(..., context=...)`` value (as the graph's context type when it
    declares one); never checkpointed, so a resume passes it again."""
    resume_values: list[Any] = field(default_factory=list, repr=False)
    effects: dict[str, Any] = field(default_factory=dict, repr=False)
    _interrupts_seen: int = field(default=0, repr=False)
    _subgraph_calls: int = field(default=0, repr=False)
    """Subgraphs this task called explicitly so far (each gets a namespace of its own)."""
    _messages_streamed: int = field(default=0, repr=False)
    """Messages this attempt of the task streamed so far (each gets an id of its own)."""
    memory_store: Store | None = field(default=None, repr=False)
    """The graph's memory store (None: compiled without one)."""
    staged: list[MemoryWrite] = field(default_factory=list, repr=False)
    """This attempt's memory writes, committed with the step (see :attr:`store`)."""
    inline: bool = field(default=False, repr=False)
    """The node's code runs on the event loop itself (a lone sync node that takes no
    context), where it cannot wait for anything: a ``plait.task`` it calls runs right there."""
    task_calls: TaskCalls | None = field(default=None, repr=False)
    """This attempt's calls of ``plait.task`` functions (numbered, and those still running),
    made by :mod:`plait.func` on the first call."""

    @property
    def store(self) -> TaskStore:
        """The graph's memory store (:class:`plait.Store`'s API: ``put``, ``get``, ``search``,
        ``delete``, ``list_namespaces`` and their ``a``-twins), for long-term memory shared
        by every thread.

        Writes are staged with this task and committed in the transaction that commits its
        step (when the store shares the checkpointer's database: ``compile(checkpointer=cp,
        store=cp.store)``), so a task re-run after a crash never writes twice and nobody
        sees a memory before its step is committed; ``get`` and ``search`` see this task's
        own staged writes.

        Raises:
            NoStoreError: the graph was compiled without a store.
        """
        if self.memory_store is None:
            raise NoStoreError(self.node)
        return TaskStore(self.memory_store, self.staged, self.host.unsettled_memory)

    @property
    def message_seed(self) -> str:
        """What names the messages this task writes without an id (:func:`message_id`): the
        task id, stable across re-runs of the task, with its thread and namespace, because a
        fork copies a thread's checkpoints, planned tasks and their ids included, and the two
        branches must not give one id to two different messages."""
        if self.thread_id is None:
            return self.task_id
        return f"{self.namespace}\x00{self.thread_id}\x00{self.task_id}"

    @property
    def idempotency_key(self) -> str:
        """Stable across re-runs of this task (after a crash, a retry, an interrupt): pass it
        to external APIs so a repeated call is recognised as the same request."""
        raw = f"{self.namespace}\x00{self.thread_id}\x00{self.task_id}"
        return hashlib.blake2b(raw.encode(), digest_size=16).hexdigest()

    def emit(self, payload: Any) -> None:
        """Send a custom event (JSON data) to ``stream(mode="custom")`` subscribers."""
        self.host.emit_custom(self.node, self.step, payload)

    def once(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run a side effect for this task and record its result, in a sync node.

        What it guarantees: the result (JSON data) is recorded in the checkpoint store
        before this returns, and a re-run of the node (after an interrupt, a failure later in
        the node, a crash) returns the recorded result without calling ``fn`` again: a
        finished effect is never repeated. Right before calling ``fn`` the run checks with
        the store that it still holds the thread, so a run whose thread was taken over
        stops (``LeaseLostError``) instead of running the effect. What no crash-safe design
        can promise: an effect cut off by a crash after it acted and before its result was
        recorded runs again on resume. Pass :attr:`idempotency_key` to the outside system
        (a payment API's idempotency key, a message id) so that it recognises the repeat.
        """
        if name in self.effects:
            return self.effects[name]
        if self.host.durable and on_loop_thread(self.host.loop):
            raise SyncCallOnLoopError(self.node, "once", "aonce")
        with effect_span(self.host, name, self.node):
            if self.host.durable:
                asyncio.run_coroutine_threadsafe(self.host.confirm_lease(), self.host.loop).result()
            value = freeze(fn(), f"once({name!r})", self.node)
            if self.host.durable:
                asyncio.run_coroutine_threadsafe(
                    self.host.record_effect(self.task_id, name, value), self.host.loop
                ).result()
        self.effects[name] = value
        return value

    async def aonce(self, name: str, fn: Callable[[], Any] | Callable[[], Awaitable[Any]]) -> Any:
        """:meth:`once` for async nodes; ``fn`` may be sync or async."""
        if name in self.effects:
            return self.effects[name]
        with effect_span(self.host, name, self.node):
            if self.host.durable:
                await self.host.confirm_lease()
            result = fn()
            if inspect.isawaitable(result):
                result = await result
            value = freeze(result, f"once({name!r})", self.node)
            if self.host.durable:
                await self.host.record_effect(self.task_id, name, value)
        self.effects[name] = value
        return value

    def stream_message(self, chunks: Iterable[Any], *, id: str | None = None) -> dict[str, Any]:
        """Stream a model's answer, chunk by chunk, in a sync node; the finished message.

        ``chunks`` are what a chat model's stream yields: text deltas (``str``), dicts in
        LangChain's shape (``{"content": ..., "tool_call_chunks": [...]}``) or objects with a
        ``.content`` attribute (LangChain's ``AIMessageChunk``, read by duck typing). Each
        reaches ``stream(mode="messages")`` as it comes, as a ``(chunk, metadata)`` pair in
        LangGraph's shape, and the message they add up to is returned in LangChain's shape
        (``{"type": "ai", "id", "content", "tool_calls": [...], ...}``), ready to be written
        to a messages channel: only that message is checkpointed, never the chunks. With
        nobody streaming ``messages``, the chunks are only added up.

        Args:
            chunks: the model's stream.
            id: the message's id. By default one derived from the task, the same when the
                task runs again (a retry, a resume after an interrupt or a crash), so a
                re-run answer replaces the first in the channel instead of adding a second.
                The ids chunks carry (LangChain's ``run-...``) are ignored: they change with
                every call.

        Raises:
            SyncCallOnLoopError: called on the event loop (an async node): use
                :meth:`astream_message`.
            MessageChunkError: a chunk that is none of the above.
        """
        if on_loop_thread(self.host.loop):
            raise SyncCallOnLoopError(self.node, "stream_message", "astream_message")
        stream = self._message_stream(id)
        with stream.answering(self.host):
            for chunk in chunks:
                stream.add(chunk)
        return stream.message

    async def astream_message(
        self, chunks: AsyncIterable[Any] | Iterable[Any], *, id: str | None = None
    ) -> dict[str, Any]:
        """:meth:`stream_message` for async nodes: ``chunks`` may be an async iterable (a
        model's ``astream()``) or a plain one."""
        stream = self._message_stream(id)
        with stream.answering(self.host):
            if isinstance(chunks, AsyncIterable):
                async for chunk in chunks:
                    stream.add(chunk)
            else:
                for chunk in chunks:
                    stream.add(chunk)
        return stream.message

    def _message_stream(self, id: str | None) -> _MessageStream:
        n = self._messages_streamed
        self._messages_streamed += 1
        mid = id if id is not None else message_id(f"{self.message_seed}|stream", n)
        return _MessageStream(
            MessageBuilder(mid), self.host.message_sink(self.node, self.step, self.task_id, mid), self.node
        )

    async def subgraph(self, graph: Any, input: Any) -> dict[str, Any]:
        """Run ``graph`` (a compiled graph without a checkpointer of its own, or a builder)
        on ``input`` as a subgraph of this task: checkpointed in a child namespace of the
        thread, under this run's lease, so a crash or an interrupt resumes it where it
        stood; its final values. The same as ``await graph.ainvoke(input)`` inside a node
        (see :mod:`plait.graph.subgraph`)."""
        compiled = graph if hasattr(graph, "ainvoke") else graph.compile()
        token = current_node.set(self)  # ainvoke sees which task calls it
        try:
            return await compiled.ainvoke(input)  # type: ignore[no-any-return]
        finally:
            current_node.reset(token)

    def _next_interrupt(self, value: Any) -> Any:
        index = self._interrupts_seen
        self._interrupts_seen += 1
        if index < len(self.resume_values):
            return self.resume_values[index]
        iid = hashlib.blake2b(f"{self.task_id}:{index}".encode(), digest_size=8).hexdigest()
        raise GraphInterrupt(
            Interrupt(
                id=iid, value=freeze(value, "interrupt", self.node), node=self.node, task_id=self.task_id, index=index
            )
        )


class _MessageStream:
    """One message being streamed: its chunks added up, and sent on when someone listens."""

    __slots__ = ("builder", "count", "message", "node", "sink")

    def __init__(self, builder: MessageBuilder, sink: Callable[[Any], None] | None, node: str) -> None:
        self.builder = builder
        self.sink = sink
        self.node = node
        self.count = 0
        self.message: dict[str, Any] = {}
        """The finished message, once the chunks are all in (:meth:`answering`)."""

    @contextlib.contextmanager
    def answering(self, host: object) -> Iterator[None]:
        """While the chunks come in: a ``chat`` span when the run is traced; then the message."""
        with chat_span(host, self.node, self.builder.id) as traced:
            yield
            self.message = self.builder.message()
            if traced is not None:
                traced(self.message)

    def add(self, chunk: Any) -> None:
        try:
            read = read_chunk(chunk, self.count)
        except MessageChunkError as exc:
            raise MessageChunkError(exc.index, exc.reason, self.node) from None
        self.count += 1
        self.builder.add(read)
        if self.sink is not None:
            self.sink(chunk_item(self.builder.id, read))


node_context = given_maker(
    NodeContext,
    (
        "thread_id",
        "namespace",
        "checkpoint_id",
        "step",
        "node",
        "task_id",
        "host",
        "context",
        "resume_values",
        "effects",
        "memory_store",
    ),
)
"""``NodeContext(thread_id=..., ..., memory_store=...)`` with those fields given in this order, at
a third of the cost (see :func:`~plait._fast_init.given_maker`): the engine makes one a task."""


current_node: contextvars.ContextVar[NodeContext | None] = contextvars.ContextVar("plait_node_context", default=None)


def restart(ctx: NodeContext) -> None:
    """Before a task's next attempt (a retry): its ``interrupt()`` calls count from the first
    again, so that each is matched to the same resume value as before, and its streamed
    messages too, so that each gets the same id as before; its staged memory writes go."""
    ctx._interrupts_seen = 0
    ctx._messages_streamed = 0
    ctx.staged.clear()  # a failed attempt's memory writes are not the task's
    ctx.task_calls = None  # task calls are numbered from the first again (finished ones replay)


def next_subgraph_call(ctx: NodeContext) -> int:
    """The number of the task's next explicit subgraph call (0, 1, ...): the ``n``-th call runs
    in a namespace of its own, found again when the task re-runs."""
    n = ctx._subgraph_calls
    ctx._subgraph_calls += 1
    return n


def interrupt(value: Any = None) -> Any:
    """Pause the run and ask a human; returns the value given when the run is resumed.

    The first call raises a signal that stops the run; the payload ``value`` (JSON data) is
    stored with the checkpoint and shown by ``get_state()``. ``invoke(Command(resume=v),
    thread_id=...)`` re-runs the node from its start, and this call then returns ``v``.
    Several calls in one node are matched to resume values by order.
    """
    ctx = current_node.get()
    if ctx is None:
        raise PlaitError("interrupt() was called outside a running node")
    if not ctx.host.durable:
        raise NoCheckpointerError("interrupt()")
    return ctx._next_interrupt(value)
