"""``@plait.task``: a function whose calls inside an entrypoint (or a node) are durable steps."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

from plait.engine.context import current_node
from plait.errors import TaskOutsideRunError
from plait.func._calls import CallSpec, TaskFuture, start_call
from plait.types import CachePolicy, RetryPolicy

__all__ = ["TaskDecorator", "TaskFunction", "task"]

P = ParamSpec("P")
T = TypeVar("T")


def _name_of(fn: Callable[..., Any]) -> str:
    """A task's default name: its function's (a partial's wrapped function's, a callable
    object's class's)."""
    inner: Any = fn
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__name__", None)
    return name if isinstance(name, str) else type(inner).__name__


class TaskFunction(Generic[P, T]):
    """A task: call it like its function, inside an entrypoint or a node, for a
    :class:`TaskFuture` of its result (see :func:`task`)."""

    def __init__(
        self,
        fn: Callable[P, Awaitable[T]] | Callable[P, T],
        *,
        name: str | None,
        retry: RetryPolicy | None,
        cache_policy: CachePolicy | None = None,
    ):
        self.func = fn
        """The plain function: ``my_task.func(x)`` runs it as it is (no recording), e.g. in a
        unit test."""
        self.name = name or _name_of(fn)
        self.retry = retry
        self.cache_policy = cache_policy
        """Its results are kept by its arguments in the run's cache (``entrypoint(cache=...)``
        or ``compile(cache=...)``), for ``cache_policy.ttl`` seconds."""
        self._spec = CallSpec.of(self.name, fn, retry, cache_policy)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<plait.task {self.name!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> TaskFuture[T]:
        """Start the task (or replay its recorded result) and return its future.

        Raises:
            TaskOutsideRunError: called outside a running entrypoint or node.
        """
        ctx = current_node.get()
        if ctx is None:
            raise TaskOutsideRunError(self.name)
        return start_call(ctx, self._spec, args, kwargs)


class TaskDecorator(Protocol):
    """What ``@task(name=..., retry=...)`` is: it makes the function it decorates a task."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[T]], /) -> TaskFunction[P, T]: ...
    @overload
    def __call__(self, fn: Callable[P, T], /) -> TaskFunction[P, T]: ...


@overload
def task(
    fn: Callable[P, Awaitable[T]],
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    cache_policy: CachePolicy | None = None,
) -> TaskFunction[P, T]: ...
@overload
def task(
    fn: Callable[P, T],
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    cache_policy: CachePolicy | None = None,
) -> TaskFunction[P, T]: ...
@overload
def task(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    cache_policy: CachePolicy | None = None,
) -> TaskDecorator: ...
def task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    cache_policy: CachePolicy | None = None,
) -> TaskFunction[Any, Any] | TaskDecorator:
    """Make ``fn`` a task: ``@plait.task``, ``@plait.task(name=..., retry=...)`` or
    ``plait.task(fn, name=...)``.

    Called inside a running :func:`entrypoint` (or a graph's node), a task starts at once and
    returns a :class:`TaskFuture`: ``.result()`` in sync code, ``await`` in async code; calls
    made before waiting run at the same time (async tasks on the loop, sync ones in worker
    threads). Its result, JSON data, is recorded in the checkpoint store as soon as it
    finishes, so a resumed run (after an ``interrupt()``, a failure or a crash) gets it back
    without running the task again. A task that raises is not recorded: it runs again on
    resume; ``retry`` (a :class:`~plait.RetryPolicy`) retries it first, inside the call.

    Calls are matched to their records by their order, so the calling function must make the
    same task calls in the same order on every run (:class:`~plait.errors.TaskReplayError`
    otherwise). A task may call other tasks; their calls are numbered within it.

    Args:
        name: the task's name in streams and records (default: the function's name).
        retry: how a failing call is retried before its future raises.
        cache_policy: keep its results by its arguments (``key_func(*args, **kwargs)``, by
            default a hash of their JSON) in the run's cache (``entrypoint(cache=...)`` or
            ``compile(cache=...)``) for ``ttl`` seconds: a call whose key is kept returns
            the kept result without running, in any thread and, with a cache in the
            checkpointer's database, in any process. Without a cache it is ignored.
    """
    if fn is not None:
        return TaskFunction(fn, name=name, retry=retry, cache_policy=cache_policy)

    def wrap(f: Callable[..., Any]) -> TaskFunction[Any, Any]:
        return TaskFunction(f, name=name, retry=retry, cache_policy=cache_policy)

    return wrap
