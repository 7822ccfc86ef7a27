"""Running one task: calling the node, retries, timeouts, and turning its return value into
writes and routes."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import weakref
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from plait._codec import freeze, freeze_send_arg
from plait._fast_init import given_maker
from plait._frozen import FrozenView
from plait.checkpoint.cache import NodeCache
from plait.engine.caching import NodeCaching
from plait.engine.context import GraphInterrupt, NodeContext, ParentCommand, current_node, restart
from plait.engine.executor import NodeExecutor, default_executor
from plait.engine.plan import Route
from plait.engine.spec import GraphSpec, NodeSpec, RouterSpec
from plait.errors import (
    GraphError,
    LeaseLostError,
    MissingNodeError,
    NoCheckpointerError,
    NodeError,
    NodeTimeoutError,
    PlaitError,
    StateError,
    TaskReplayError,
)
from plait.state.run_state import RunState
from plait.state.schema import StateSchema
from plait.store import MemoryWrite
from plait.types import END, Command, Send
from plait.types import Interrupt as InterruptRecord

__all__ = ["StateView", "TaskOutcome", "finished", "in_thread", "run_task"]


# The types the per-task paths test against, made once: ``isinstance(x, list | tuple)``
# builds the union anew at every call, which doubles the test's cost.
_LIST_OR_TUPLE: Final = (list, tuple)
_STR_OR_SEND: Final = (str, Send)
_LIST_TUPLE_SEND: Final = (list, tuple, Send)


class _Waker:
    """Hands results of sync nodes from worker threads back to the loop, waking the loop
    once per batch of finished calls instead of once per call (a fan-out of 100 sync
    nodes would otherwise pay 100 cross-thread wake-ups)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done: list[tuple[asyncio.Future[Any], bool, Any]] = []
        self.lock = threading.Lock()

    def post(self, fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
        with self.lock:
            first = not self.done
            self.done.append((fut, ok, value))
        if first:
            self.loop.call_soon_threadsafe(self.deliver)

    def deliver(self) -> None:
        with self.lock:
            batch, self.done = self.done, []
        for fut, ok, value in batch:
            if fut.cancelled():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waker] = weakref.WeakKeyDictionary()


def in_thread(
    loop: asyncio.AbstractEventLoop,
    context: contextvars.Context,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    executor: NodeExecutor,
) -> asyncio.Future[Any]:
    """Run ``fn(*args)`` on ``executor``, inside ``context``; a future on ``loop``."""
    waker = _wakers.get(loop)
    if waker is None:
        waker = _wakers[loop] = _Waker(loop)
    fut: asyncio.Future[Any] = loop.create_future()

    def work() -> None:
        try:
            value = context.run(fn, *args)
        except BaseException as exc:
            waker.post(fut, False, exc)
        else:
            waker.post(fut, True, value)

    executor.submit(work)
    return fut


class StateView(FrozenView):
    """The read-only state a node receives: values as of the start of its super-step.

    A view of the run's table, not a copy of it. Like the frozen containers it is JSON data:
    ``Send("worker", state)`` and ``{"snapshot": state}`` store the values it shows, and
    ``plait.thaw(state)`` gives a plain, mutable dict of them.
    """

    __slots__ = ("_spec",)

    def __init__(self, values: Mapping[str, Any], spec: GraphSpec) -> None:
        self._values = values
        self._spec = spec

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise self._spec.schema.missing(key, self._values, self._spec.writers) from None

    def __repr__(self) -> str:
        return f"StateView({dict(self._values)!r})"


@dataclass(slots=True)
class TaskOutcome:
    """What one task produced."""

    writes: list[tuple[str, Any]] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    interrupt: InterruptRecord | None = None
    error: BaseException | None = None
    folded: dict[str, Any] | None = None
    """Its writes folded on the step's base, when its routers needed them (None: not
    computed): a step of this one task merges to exactly these values."""
    memory: list[MemoryWrite] = field(default_factory=list)
    """Its memory store writes (``ctx.store``), committed with its step."""
    seconds: float | None = None
    """How long the task took, its retries' waits included (None: not measured here)."""
    attempts: int = 1
    """How many times its node was called (more than 1: its retry policy ran it again; 0:
    its result came from the node cache)."""
    parent: Command | None = None
    """The ``Command(graph=Command.PARENT, ...)`` it returned: for the enclosing graph, so
    it has no writes or routes here (see :class:`~plait.engine.context.ParentCommand`)."""
    cached: bool = False
    """Its writes came from the node cache: the node did not run (see :mod:`plait.engine.caching`)."""


finished = given_maker(TaskOutcome, ("writes", "routes", "folded"))
"""``TaskOutcome(writes=..., routes=..., folded=...)`` with those given in this order, at under
half the cost (see :func:`~plait._fast_init.given_maker`): every task that ends well makes one."""


def for_parent(result: Any) -> Command | None:
    """The ``Command(graph=Command.PARENT)`` in a node's return value (alone, or the first
    of a returned list), else None."""
    if isinstance(result, Command):
        return result if result.graph == Command.PARENT else None
    if isinstance(result, _LIST_OR_TUPLE):
        return next((r for r in result if isinstance(r, Command) and r.graph == Command.PARENT), None)
    return None


def normalise(
    spec: NodeSpec,
    result: Any,
    schema: StateSchema,
    seed: str | None,
    current: Mapping[str, Any] | None = None,
    managed: Container[str] = (),
) -> tuple[list[tuple[str, Any]], Any]:
    """A node's return value as (frozen writes, goto); messages written without an id are
    named by ``seed`` (the task's :attr:`NodeContext.message_seed`: a re-run of the task
    names them alike; None leaves them unnamed, as a cache keeps them). With a model state,
    the writes are validated on ``current`` (the state the node saw), and the node may
    return an instance of the model."""
    goto: Any = ()
    if isinstance(result, _LIST_OR_TUPLE) and any(isinstance(r, Command) for r in result):
        result = _joined_commands(spec, result)
    if isinstance(result, Command):
        goto = result.goto
        raw: Any = result.update
        if raw is None:
            return [], goto
    elif result is None:
        return [], goto
    elif spec.output_key is not None:
        raw = [(spec.output_key, result)]
    else:
        raw = result
    if schema.model is not None and (isinstance(raw, Mapping) or schema.model.owns(raw) or isinstance(raw, list)):
        checked = schema.checked(raw, spec.name, current or {})
        return (checked if seed is None else schema.with_ids(checked, seed)), goto
    if type(raw) is dict or isinstance(raw, Mapping):
        pairs = list(raw.items())
    elif isinstance(raw, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in raw):
        pairs = [(p[0], p[1]) for p in raw]
    else:
        raise TypeError(
            f"node {spec.name!r} returned {type(raw).__name__}: return a dict of writes, a list of "
            "(key, value) pairs, a Command or None (or add the node with output_key=...)"
        )
    writes = []
    for key, value in pairs:
        if key in managed:  # computed each step, never stored: dropped, as LangGraph drops it
            continue
        schema.channel(key, spec.name)  # UnknownChannelError naming the node
        writes.append((key, freeze(value, key, spec.name)))
    return (writes if seed is None else schema.with_ids(writes, seed)), goto


def _joined_commands(spec: NodeSpec, items: list[Any] | tuple[Any, ...]) -> Command:
    """A returned list mixing Commands and updates (mappings or ``(key, value)``
    pairs) as one Command: the writes in the order returned, every goto."""
    pairs: list[tuple[str, Any]] = []
    goto: list[Any] = []
    for item in items:
        update = item
        if isinstance(item, Command):
            goto.extend([item.goto] if isinstance(item.goto, str | Send) else item.goto)
            update = item.update
        if update is None:
            continue
        if isinstance(update, Mapping):
            pairs.extend(update.items())
        elif isinstance(update, list | tuple) and len(update) == 2 and isinstance(update[0], str):
            pairs.append((update[0], update[1]))
        elif isinstance(update, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in update):
            pairs.extend((p[0], p[1]) for p in update)
        else:
            raise TypeError(
                f"node {spec.name!r} returned a list with {type(item).__name__} {item!r} beside Commands: "
                "each item is a Command, a dict of writes or a (key, value) pair"
            )
    return Command(update=pairs, goto=goto)


def goto_routes(goto: Any, nodes: Mapping[str, NodeSpec], source: str) -> list[Route]:
    if type(goto) is str and (goto in nodes or goto == END):
        return [goto]
    if isinstance(goto, _STR_OR_SEND):
        goto = [goto]
    out: list[Route] = []
    for g in goto:
        if isinstance(g, Send):
            if g.node not in nodes:
                raise MissingNodeError(g.node, tuple(nodes))
            arg = freeze_send_arg(g.arg, g.node, source)
            model = nodes[g.node].send_model
            if model is not None:  # refused where it is sent, not later when the node would start
                model.sent(arg, g.node, source)
            out.append((g.node, arg))
        elif g == END:
            out.append(END)
        elif isinstance(g, str):
            if g not in nodes:
                raise MissingNodeError(g, tuple(nodes))
            out.append(g)
        else:
            raise PlaitError(f"node {source!r} routed to {g!r}: a route is a node name, END, or a Send")
    return out


def chosen_routes(r: RouterSpec, choice: Any, nodes: Mapping[str, NodeSpec]) -> list[Route]:
    """The routes of router ``r``'s answer ``choice`` (awaited, when it was awaitable)."""
    if r.path_map is not None and not isinstance(choice, _LIST_TUPLE_SEND):
        if choice not in r.path_map:
            raise GraphError(
                f"the router of {r.source!r} returned {choice!r}, which its path_map does not list "
                f"({', '.join(repr(k) for k in r.path_map)})"
            )
        choice = r.path_map[choice]
    elif r.path_map is not None and isinstance(choice, _LIST_OR_TUPLE):
        choice = [r.path_map.get(c, c) if isinstance(c, str) else c for c in choice]
    if choice is None:
        return []
    return goto_routes(choice, nodes, r.source)


async def compute_routes(
    spec: GraphSpec, node: str, state: RunState, base: Mapping[str, Any], writes: list[tuple[str, Any]], goto: Any
) -> list[Route]:
    """Static edges, then what the routers choose (seeing the node's own writes), then goto."""
    return (await routes_and_fold(spec, node, state, base, writes, goto))[0]


async def routes_and_fold(
    spec: GraphSpec, node: str, state: RunState, base: Mapping[str, Any], writes: list[tuple[str, Any]], goto: Any
) -> tuple[list[Route], dict[str, Any] | None]:
    """:func:`compute_routes`, and the node's writes folded on ``base`` when its routers
    needed them (None otherwise), so that a step of one task need not fold them again."""
    routes: list[Route] = list(spec.edges.get(node, ()))
    routers = spec.routers.get(node)
    own = None
    if routers:
        own = state.fold(base, writes, node) if writes else {}
        view: Any = StateView({**base, **own}, spec) if own else StateView(base, spec)
        if spec.schema.model is not None:  # a router reads the state as the model, as a node does
            view = spec.schema.model.instance({**base, **own})
        for r in routers:
            choice = r.fn(view)
            if type(choice) is not str and inspect.isawaitable(choice):  # (a node name: the usual answer)
                choice = await choice
            routes.extend(chosen_routes(r, choice, spec.nodes))
    if goto:
        routes.extend(goto_routes(goto, spec.nodes, node))
    return routes, own


class _NodeTimedOut(Exception):
    """Our own timeout fired (as opposed to a TimeoutError the node raised itself)."""


async def _call(spec: NodeSpec, arg: Any, ctx: NodeContext, executor: NodeExecutor | None) -> Any:
    """An async node awaited on the loop, or a sync one on a worker thread (a lone sync node
    that may run on the loop itself is :func:`_call_inline`'s, decided by :func:`run_task`)."""
    args = (arg, ctx) if spec.takes_ctx else (arg,)
    if spec.is_async:
        token = current_node.set(ctx)
        try:
            if spec.timeout is None:
                return await spec.fn(*args)
            async with asyncio.timeout(spec.timeout) as cm:
                try:
                    return await spec.fn(*args)
                except asyncio.CancelledError:
                    if cm.expired():
                        raise _NodeTimedOut from None
                    raise
        finally:
            current_node.reset(token)
    context = contextvars.copy_context()
    context.run(current_node.set, ctx)
    fut = in_thread(asyncio.get_running_loop(), context, spec.fn, args, executor or default_executor())
    if spec.timeout is None:
        return await fut
    done, _ = await asyncio.wait((fut,), timeout=spec.timeout)
    if not done:
        fut.cancel()  # the thread keeps running to its end; its result is dropped
        raise _NodeTimedOut
    return fut.result()


def _call_inline(spec: NodeSpec, arg: Any, ctx: NodeContext) -> Any:
    """A lone sync node that takes no context, called on the loop itself (see
    :meth:`~plait.engine.stepping.Stepping._run_tasks`): no worker thread, no coroutine."""
    ctx.inline = True
    token = current_node.set(ctx)
    try:
        return spec.fn(arg)
    finally:
        current_node.reset(token)


async def _routed(
    graph: GraphSpec,
    node: NodeSpec,
    ctx: NodeContext,
    state: RunState,
    base: Mapping[str, Any],
    writes: list[tuple[str, Any]],
    goto: Any,
) -> TaskOutcome:
    """The outcome of a node's writes (its own, or a cached result's): routed by its edges,
    its routers (which may interrupt or fail) and its goto."""
    try:
        routes, folded = await routes_and_fold(graph, node.name, state, base, writes, goto)
    except GraphInterrupt as signal:  # interrupt() in a router
        return TaskOutcome(interrupt=signal.interrupt)
    except Exception as exc:
        return _misrouted(node, ctx, exc)
    return finished(writes, routes, folded)


def _routed_now(
    graph: GraphSpec, node: NodeSpec, ctx: NodeContext, writes: list[tuple[str, Any]], goto: Any
) -> TaskOutcome:
    """:func:`_routed` for a node without routers (nothing to await: no coroutine), routed
    by its edges and its goto."""
    try:
        routes: list[Route] = list(graph.edges.get(node.name, ()))
        if goto:
            routes.extend(goto_routes(goto, graph.nodes, node.name))
    except Exception as exc:
        return _misrouted(node, ctx, exc)
    return finished(writes, routes, None)


def _misrouted(node: NodeSpec, ctx: NodeContext, exc: Exception) -> TaskOutcome:
    """The outcome of a task whose routes could not be made."""
    if isinstance(exc, PlaitError):  # a refused route: the state layer's own words
        return TaskOutcome(error=exc)
    err = NodeError(node.name, ctx.step, ctx.thread_id, exc)  # a router failed
    err.__cause__ = exc
    return TaskOutcome(error=err)


async def _from_cache(
    cache: NodeCache,
    graph: GraphSpec,
    node: NodeSpec,
    arg: Any,
    ctx: NodeContext,
    state: RunState,
    base: Mapping[str, Any],
) -> tuple[NodeCaching | None, TaskOutcome | None]:
    """The task's use of the cache, and its outcome when its key is cached (its messages
    named by this task, as its own writes would be)."""
    try:
        caching = await NodeCaching.start(cache, node, arg, graph.schema)
    except PlaitError as exc:  # a key that cannot be made: the node's own mistake
        return None, TaskOutcome(error=exc)
    if caching.hit is None:
        return caching, None
    writes, goto = caching.hit
    out = await _routed(graph, node, ctx, state, base, graph.schema.with_ids(writes, ctx.message_seed), goto)
    out.cached, out.attempts = out.error is None and out.interrupt is None, 0
    return caching, out


async def run_task(  # noqa: PLR0912, PLR0915 - each way a node's call can end (result, interrupt, lease lost, refusal, timeout, retry) in one place
    graph: GraphSpec,
    node: NodeSpec,
    arg: Any,
    ctx: NodeContext,
    state: RunState,
    base: Mapping[str, Any],
    *,
    inline: bool,
    on_retry: Callable[[int, BaseException, bool], None] | None = None,
    executor: NodeExecutor | None = None,
    on_attempt: Callable[[int], None] | None = None,
    cache: NodeCache | None = None,
) -> TaskOutcome:
    """Call the node (with retries and timeout) and compute its writes and routes.

    Node failures come back in ``TaskOutcome.error`` as NodeError (cause chained); a write
    the state refuses (unknown channel, not JSON data) comes back as that StateError; an
    interrupt comes back in ``TaskOutcome.interrupt``. Nothing is raised, so siblings finish.
    With a ``cache`` and the node's ``cache_policy``, a cached result is used instead of
    calling the node, and a finished node's result is kept (see :mod:`plait.engine.caching`).
    """
    caching = None
    if cache is not None and node.cache_policy is not None and not ctx.resume_values:
        caching, hit = await _from_cache(cache, graph, node, arg, ctx, state, base)
        if hit is not None:
            return hit
    attempt = 1
    policy = node.retry
    while True:
        if on_attempt is not None:  # (tracing: a span per attempt)
            on_attempt(attempt)
        try:
            # One call of the node: its ``plait.task`` calls still running end first, and a
            # command a subgraph it ran handed up to its parent is this node's own.
            try:
                try:
                    if inline and not node.is_async and node.timeout is None and not node.takes_ctx:
                        result = _call_inline(node, arg, ctx)
                    else:
                        result = await _call(node, arg, ctx, executor)
                finally:
                    if ctx.task_calls is not None:
                        await ctx.task_calls.settle()
            except ParentCommand as signal:
                result = Command(update=signal.command.update, goto=signal.command.goto)
        except GraphInterrupt as signal:
            return TaskOutcome(interrupt=signal.interrupt)
        except LeaseLostError as exc:  # ctx.once() found the thread taken over: stop, do not retry
            return TaskOutcome(error=exc)
        except (NoCheckpointerError, StateError, TaskReplayError) as exc:
            # plait's node-facing API refused (interrupt() without a checkpointer, a once() or
            # task result that is not JSON data, a task replayed out of order): its message
            # already says what to do
            return TaskOutcome(error=exc)
        except _NodeTimedOut as exc:
            err: BaseException = NodeTimeoutError(node.name, ctx.step, ctx.thread_id, node.timeout or 0.0)
            err.__cause__ = exc
            retry = policy is not None and attempt < policy.max_attempts and policy.should_retry(err)
        except Exception as exc:
            # Anything the node's own code raises (a PlaitError from an inner graph included)
            # is this node's failure: wrapped, so the error names the node that failed here.
            err = NodeError(node.name, ctx.step, ctx.thread_id, exc)
            err.__cause__ = exc
            retry = policy is not None and attempt < policy.max_attempts and policy.should_retry(exc)
        else:
            if (up := for_parent(result)) is not None:
                return TaskOutcome(parent=up, attempts=attempt)
            try:
                raw, goto = normalise(node, result, graph.schema, None, base, graph.managed)
            except PlaitError as exc:  # a refused write: the state layer's own words
                return TaskOutcome(error=exc)
            except Exception as exc:  # a return value that is not writes (TypeError), a model's validator
                err = NodeError(node.name, ctx.step, ctx.thread_id, exc)
                err.__cause__ = exc
                return TaskOutcome(error=err)
            writes = graph.schema.with_ids(raw, ctx.message_seed) if graph.names_messages else raw
            if graph.routers.get(node.name):
                out = await _routed(graph, node, ctx, state, base, writes, goto)
            else:
                out = _routed_now(graph, node, ctx, writes, goto)
            out.attempts = attempt
            if ctx.staged:
                out.memory = list(ctx.staged)
            if caching is not None and out.error is None and out.interrupt is None:
                try:
                    await caching.keep(raw, goto)
                except PlaitError as exc:
                    return TaskOutcome(error=exc)
            return out
        if on_retry is not None:
            on_retry(attempt, err, retry)
        if not retry or policy is None:
            return TaskOutcome(error=err)
        await asyncio.sleep(policy.delay(attempt))
        attempt += 1
        restart(ctx)
