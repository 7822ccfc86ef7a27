"""A ``plait.task`` call inside a running node: numbered, run concurrently, recorded, replayed.

A task call is a durable step built on the effects ledger that ``ctx.once`` writes to: its
result is recorded in the checkpoint store (a pending write of kind ``effect`` of the node's
task) as soon as it finishes, and a re-run of the node (after an interrupt, a failure, a
crash) gets the recorded result back instead of running the task again.

Which recorded result belongs to which call is decided by the call's number, given in the
order the calls are made: the n-th task call of a node attempt is ``__task:n``, and a call
made inside a running task is numbered within that task (``__task:n/0``, ``__task:n/1``),
so tasks running at the same time number their own calls without racing each other. The
record keeps the task's name, so a function that calls its tasks in another order on a
resume is caught (:class:`~plait.errors.TaskReplayError`) instead of being handed another
task's result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from plait._codec import freeze
from plait._frozen import thaw
from plait._sync import on_loop_thread
from plait.checkpoint.cache import MISS, cache_key, fn_identity, lookup, store
from plait.engine.context import NodeContext, current_node
from plait.engine.executor import default_executor
from plait.engine.spec import is_async_callable
from plait.engine.tasks import in_thread
from plait.errors import NotSerializableError, TaskReplayError, TaskResultError, TaskWaitOnLoopError
from plait.tracing.hooks import effect_span
from plait.types import CachePolicy, RetryPolicy

if TYPE_CHECKING:
    from plait.checkpoint.cache import NodeCache

__all__ = ["EFFECT_PREFIX", "CallSpec", "Calls", "TaskFuture", "start_call"]

T = TypeVar("T")

EFFECT_PREFIX = "__task:"
"""The effects ledger names a task call's record with this prefix and the call's number."""


class TaskFuture(Generic[T]):
    """What calling a task returns: its result, once it has run (or been replayed).

    ``future.result()`` waits for it in sync code, ``await future`` in async code; several
    calls made before waiting run at the same time. If the task raised, both raise that
    exception (a task's failure is not recorded: a resume runs it again).
    """

    __slots__ = ("_fut", "_job", "name", "node")

    def __init__(
        self, fut: concurrent.futures.Future[T] | asyncio.Future[T], name: str, node: str, job: _Job | None = None
    ) -> None:
        self._fut = fut
        self._job = job
        self.name = name
        """The task's name."""
        self.node = node

    def __repr__(self) -> str:
        state = "done" if self.done() else "running"
        return f"<TaskFuture {self.name!r} {state}>"

    def done(self) -> bool:
        """Whether the task has ended (finished, failed or replayed)."""
        return self._fut.done()

    def cancel(self) -> bool:
        """Cancel the call if it can be: an async task is cancelled where it waits (a sync
        one that already runs in its thread goes on, its result dropped). A cancelled call is
        not recorded: a resume runs it again. Whether it was cancelled."""
        if self._job is not None:
            self._job.claim()  # nobody runs it now
        return self._fut.cancel()

    def cancelled(self) -> bool:
        return self._fut.cancelled()

    def result(self, timeout: float | None = None) -> T:
        """The task's result, waiting for it (at most ``timeout`` seconds) in sync code.

        Raises:
            TaskWaitOnLoopError: called on the event loop (async code) before the task
                ended: ``await`` the future there.
            TimeoutError: the task did not end within ``timeout``.
        """
        fut = self._fut
        if isinstance(fut, asyncio.Future):
            if not fut.done():
                raise TaskWaitOnLoopError(self.node, self.name)
            return fut.result()
        job = self._job
        if job is not None and not fut.done():
            job.ready.wait()  # (the loop's lease check, a moment)
            if job.claim():
                job.run()  # no pool thread took it yet: this waiting thread runs it
        if not fut.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                raise TaskWaitOnLoopError(self.node, self.name)
        return fut.result(timeout)

    def __await__(self) -> Generator[Any, None, T]:
        fut = self._fut
        if isinstance(fut, asyncio.Future):
            return (yield from fut)
        return (yield from asyncio.wrap_future(fut))


class _Job:
    """A sync task call's work, run by whichever thread comes first: one of the executor's,
    or the thread that waits for the result (a sync task waiting for a sync task it called).
    Without the second, sync tasks that each wait for one they called could hold every thread
    of the pool while their calls wait for a thread: a deadlock."""

    __slots__ = ("_claimed", "_lock", "context", "done", "ready", "work")

    def __init__(self, context: contextvars.Context, work: Callable[[], Any]) -> None:
        self._claimed = False
        self._lock = threading.Lock()
        self.context = context
        self.work = work
        self.done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.ready = threading.Event()
        """Set once the loop checked the run still holds its thread (the job may run), or
        once the call ended without running it."""

    def claim(self) -> bool:
        """Take the job (True), unless another thread took it (or the call ended)."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def run(self) -> None:
        try:
            value = self.context.run(self.work)
        except BaseException as exc:  # an interrupt() in the task included
            self.done.set_exception(exc)
        else:
            self.done.set_result(value)

    def run_if_free(self) -> None:
        """A pool thread's turn: run the job unless a waiting thread took it first."""
        if self.claim():
            self.run()

    def ended(self, _: object = None) -> None:
        """The call ended (recorded, failed, cancelled): nobody may run the job any more."""
        self.claim()
        self.ready.set()


@dataclass(eq=False)
class _Scope:
    """Where call numbers come from: a node attempt's top level, or one running task."""

    prefix: str
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def next_key(self) -> str:
        return f"{self.prefix}{next(self.counter)}"


_scope: contextvars.ContextVar[tuple[NodeContext, _Scope] | None] = contextvars.ContextVar(
    "plait_task_scope", default=None
)
"""The task whose code is running (its calls are numbered within it), with its node's context."""


class Calls:
    """One node attempt's task calls (``ctx.task_calls``): the top-level numbering, and the
    calls still running, which the engine waits for before the node's attempt ends so that
    none runs on (or records a result) after its step was saved."""

    __slots__ = ("_lock", "_running", "ctx", "top", "unrecorded")

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.top = _Scope(EFFECT_PREFIX)
        self.unrecorded: list[tuple[str, dict[str, Any]]] = []
        """Finished calls of an inline node (:func:`_run_inline`), recorded by :meth:`settle`."""
        self._running: set[concurrent.futures.Future[Any] | asyncio.Future[Any]] = set()
        self._lock = threading.Lock()

    def add(self, fut: concurrent.futures.Future[Any] | asyncio.Future[Any]) -> None:
        with self._lock:
            self._running.add(fut)
        fut.add_done_callback(self._discard)

    def _discard(self, fut: Any) -> None:
        with self._lock:
            self._running.discard(fut)

    async def settle(self) -> None:
        host = self.ctx.host
        while self.unrecorded:
            key, record = self.unrecorded.pop(0)
            if host.durable:
                await host.record_effect(self.ctx.task_id, key, record)
        me = asyncio.current_task()
        while True:
            with self._lock:
                running = list(self._running)
            if not running:
                return
            if me is not None and me.cancelling():  # the node was cancelled: so are its calls
                for f in running:
                    f.cancel()  # (a sync task's thread runs to its end; its result is dropped)
            waits = [f if isinstance(f, asyncio.Future) else asyncio.wrap_future(f) for f in running]
            await asyncio.wait(waits)
            for f in waits:  # a failure nobody waited for is this node's business, not a warning's
                if not f.cancelled():
                    f.exception()


def _calls(ctx: NodeContext) -> Calls:
    calls = ctx.task_calls
    if not isinstance(calls, Calls):
        calls = ctx.task_calls = Calls(ctx)
    return calls


@dataclass(frozen=True, slots=True)
class CallSpec:
    """What a task is, as a call needs it."""

    name: str
    fn: Callable[..., Any]
    retry: RetryPolicy | None
    is_async: bool
    cache_policy: CachePolicy | None = None

    @classmethod
    def of(
        cls, name: str, fn: Callable[..., Any], retry: RetryPolicy | None, cache_policy: CachePolicy | None = None
    ) -> CallSpec:
        return cls(name, fn, retry, is_async_callable(fn), cache_policy)


_Kept = tuple["NodeCache", str, str]
"""Where a call's result is kept in the run's cache: the cache, the namespace, the key."""


async def _cache_lookup(
    ctx: NodeContext, spec: CallSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[_Kept | None, Any]:
    """Where the call's result is kept (None: the task or the run keeps none) and what is
    kept there (:data:`~plait.checkpoint.cache.MISS`: nothing). A task's namespace is its
    function's ``module.qualname``: the same function with the same arguments, in any
    entrypoint or graph sharing the cache, gives the same result."""
    cache = getattr(getattr(ctx.host, "binding", None), "cache", None)
    if spec.cache_policy is None or cache is None:
        return None, MISS
    namespace = f"task:{spec.name}|{fn_identity(spec.fn)}"
    key = cache_key(spec.cache_policy, (args, kwargs), f"task {spec.name!r}", spread=True)
    return (cache, namespace, key), await lookup(cache, namespace, key)


async def _cache_keep(where: _Kept | None, spec: CallSpec, value: Any) -> None:
    if where is not None and spec.cache_policy is not None:
        await store(where[0], spec.cache_policy, where[1], where[2], value, f"task {spec.name!r}")


def start_call(ctx: NodeContext, spec: CallSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> TaskFuture[Any]:
    """Start one call of a task in the node ``ctx`` runs: numbered now (in call order), run
    on the node's event loop (a sync task in a worker thread), its future returned."""
    calls = _calls(ctx)
    current = _scope.get()
    scope = current[1] if current is not None and current[0] is ctx else calls.top
    key = scope.next_key()
    loop = ctx.host.loop
    fut: concurrent.futures.Future[Any] | asyncio.Future[Any]
    if ctx.inline and on_loop_thread(loop):
        fut = concurrent.futures.Future()
        try:
            fut.set_result(_run_inline(ctx, calls, spec, key, args, kwargs))
        except BaseException as exc:  # an interrupt() in the task included
            fut.set_exception(exc)
        return TaskFuture(fut, spec.name, ctx.node)
    if not spec.is_async and not on_loop_thread(loop):
        return _start_job(ctx, calls, spec, key, args, kwargs)
    work = _run(ctx, spec, key, args, kwargs)
    if on_loop_thread(loop):
        fut = loop.create_task(work)
    else:
        fut = asyncio.run_coroutine_threadsafe(work, loop)
    calls.add(fut)
    return TaskFuture(fut, spec.name, ctx.node)


def _start_job(
    ctx: NodeContext, calls: Calls, spec: CallSpec, key: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> TaskFuture[Any]:
    """A sync task called from a thread (a sync function's): replayed here, or made a
    :class:`_Job` that the loop hands to the executor and the caller may run itself."""
    found, value = _replayed(ctx, spec, key)
    fut: concurrent.futures.Future[Any]
    if found:
        fut = concurrent.futures.Future()
        fut.set_result(value)
        return TaskFuture(fut, spec.name, ctx.node)

    def work() -> tuple[Any, int]:
        current_node.set(ctx)
        _scope.set((ctx, _Scope(key + "/")))
        asked = ctx._interrupts_seen
        return _sync_attempts(spec, args, kwargs), ctx._interrupts_seen - asked

    job = _Job(contextvars.copy_context(), work)
    fut = asyncio.run_coroutine_threadsafe(_run_job(ctx, spec, key, job, (args, kwargs)), ctx.host.loop)
    fut.add_done_callback(job.ended)
    calls.add(fut)
    return TaskFuture(fut, spec.name, ctx.node, job)


async def _run_job(
    ctx: NodeContext, spec: CallSpec, key: str, job: _Job, call: tuple[tuple[Any, ...], Mapping[str, Any]]
) -> Any:
    """The loop's side of a :class:`_Job`: the lease checked, the result taken from the
    run's cache or the job handed to the executor (unless the caller took it), its result
    recorded and streamed."""
    host = ctx.host
    with effect_span(host, spec.name, ctx.node):
        try:
            if host.durable:
                await host.confirm_lease()
            where, kept = await _cache_lookup(ctx, spec, *call)
        except BaseException:
            job.ended()
            raise
        if kept is not MISS:
            job.ended()  # nobody runs it: the kept result is its result
            value, interrupts = thaw(kept), 0
        else:
            job.ready.set()
            executor = getattr(getattr(host, "binding", None), "executor", None) or default_executor()
            executor.submit(job.run_if_free)  # taken when a thread starts it: until then the caller may
            value, interrupts = await asyncio.wrap_future(job.done)
        record = _finished(ctx, spec, key, value, interrupts)
        if host.durable:
            await host.record_effect(ctx.task_id, key, record)
        if kept is MISS:
            await _cache_keep(where, spec, record["value"])
    return thaw(record["value"])


def _sync_attempts(spec: CallSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """Call a sync task until it returns or its retry policy gives up (in its thread)."""
    attempt, policy = 1, spec.retry
    while True:
        try:
            return spec.fn(*args, **kwargs)
        except Exception as exc:
            if policy is None or attempt >= policy.max_attempts or not policy.should_retry(exc):
                raise
        time.sleep(policy.delay(attempt))
        attempt += 1


def _replayed(ctx: NodeContext, spec: CallSpec, key: str) -> tuple[bool, Any]:
    """(True, its result) when the call ``key`` has a record; (False, None) when it has none.

    Raises:
        TaskReplayError: the record is another task's.
    """
    recorded = ctx.effects.get(key)
    if recorded is None:
        return False, None
    if not isinstance(recorded, Mapping) or recorded.get("task") != spec.name:
        was = recorded.get("task") if isinstance(recorded, Mapping) else "?"
        raise TaskReplayError(ctx.node, key[len(EFFECT_PREFIX) :], str(was), spec.name)
    # The interrupts it asked (and got answers to) count as asked: a later interrupt() of
    # the node is matched to its own answer.
    ctx._interrupts_seen += int(recorded.get("interrupts", 0))
    return True, thaw(recorded.get("value"))


def _finished(ctx: NodeContext, spec: CallSpec, key: str, value: Any, interrupts: int) -> dict[str, Any]:
    """The record of a finished call (its result checked to be JSON data), streamed."""
    try:
        frozen = freeze(value, spec.name, ctx.node)
    except NotSerializableError as exc:
        raise TaskResultError(spec.name, ctx.node, exc.path, exc.type_name) from None
    record = {"task": spec.name, "value": frozen, "interrupts": interrupts}
    ctx.effects[key] = record
    ctx.host.emit_update(spec.name, frozen)
    return record


async def _run(ctx: NodeContext, spec: CallSpec, key: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """One task call, on the loop: replayed from the ledger, or run (with retries), recorded
    and streamed."""
    found, value = _replayed(ctx, spec, key)
    if found:
        return value
    host = ctx.host
    if host.durable:
        await host.confirm_lease()
    current_node.set(ctx)  # (this coroutine runs as its own task: these sets are its own)
    _scope.set((ctx, _Scope(key + "/")))
    asked = ctx._interrupts_seen
    with effect_span(host, spec.name, ctx.node):  # (a traced run: a span per task call run)
        where, kept = await _cache_lookup(ctx, spec, args, kwargs)
        value = await _attempts(ctx, spec, args, kwargs) if kept is MISS else thaw(kept)
        record = _finished(ctx, spec, key, value, ctx._interrupts_seen - asked)
        if host.durable:
            await host.record_effect(ctx.task_id, key, record)
        if kept is MISS:
            await _cache_keep(where, spec, record["value"])
    return thaw(record["value"])


def _run_inline(
    ctx: NodeContext, calls: Calls, spec: CallSpec, key: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """One task call of a sync node that runs on the event loop (see
    :attr:`NodeContext.inline`): run right there, as the node itself is, one at a time. Its
    record is written when the node's attempt ends (:meth:`Calls.settle`), before its step is."""
    found, value = _replayed(ctx, spec, key)
    if found:
        return value
    if spec.is_async:
        raise TaskWaitOnLoopError(ctx.node, spec.name, inline=True)
    token = _scope.set((ctx, _Scope(key + "/")))
    try:
        with effect_span(ctx.host, spec.name, ctx.node):
            asked = ctx._interrupts_seen
            value = _sync_attempts(spec, args, kwargs)  # (a retry's wait blocks the loop: so does the node)
            record = _finished(ctx, spec, key, value, ctx._interrupts_seen - asked)
    finally:
        _scope.reset(token)
    calls.unrecorded.append((key, record))
    return thaw(record["value"])


async def _attempts(ctx: NodeContext, spec: CallSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """Call the task until it returns or its retry policy gives up."""
    attempt = 1
    policy = spec.retry
    while True:
        try:
            return await _once(ctx, spec, args, kwargs)
        except Exception as exc:
            if policy is None or attempt >= policy.max_attempts or not policy.should_retry(exc):
                raise
        await asyncio.sleep(policy.delay(attempt))
        attempt += 1


async def _once(ctx: NodeContext, spec: CallSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    if spec.is_async:
        result: Any = spec.fn(*args, **kwargs)
        return await result
    executor = getattr(getattr(ctx.host, "binding", None), "executor", None) or default_executor()
    call: Callable[[], Any] = lambda: spec.fn(*args, **kwargs)  # noqa: E731
    return await in_thread(ctx.host.loop, contextvars.copy_context(), call, (), executor)
