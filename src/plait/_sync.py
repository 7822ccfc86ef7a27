"""The sync facade's one trick: run a coroutine to completion from plain code.

Each thread keeps one event loop (an ``asyncio.Runner``) for its sync calls, so repeated
``invoke()`` calls do not pay for a new loop each time. Called from inside a running loop
(a notebook, an async framework), the coroutine runs on a helper thread instead, because a
loop cannot block on itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["in_sync_call", "iterate_sync", "run_sync"]

T = TypeVar("T")
_local = threading.local()
_runners: list[asyncio.Runner] = []
_lock = threading.Lock()


def _runner() -> asyncio.Runner:
    runner: asyncio.Runner | None = getattr(_local, "runner", None)
    if runner is None:
        runner = asyncio.Runner()
        _local.runner = runner
        with _lock:
            _runners.append(runner)
    return runner


class _Box:
    """Carries a result out of ``Runner.run``. Python 3.11's Runner formats the finished task
    (result included) while restoring its signal handler; a constant repr keeps that from
    costing time proportional to the result (a whole state history)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<result>"


_in_sync_call: contextvars.ContextVar[bool] = contextvars.ContextVar("plait_in_sync_call", default=False)


def in_sync_call() -> bool:
    """Whether the running code was started by the sync facade, on a loop of its own: then
    nothing else runs on that loop but this call, which a caller blocks on anyway, so a
    backend may do blocking I/O right there (see ``PostgresCheckpointer._off_loop``)."""
    return _in_sync_call.get()


async def _boxed(coro: Coroutine[Any, Any, T]) -> _Box:
    _in_sync_call.set(True)  # this task's context only
    return _Box(await coro)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result, from sync code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        box = _runner().run(_boxed(coro))
        return box.value  # type: ignore[no-any-return]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="plait-sync") as pool:
        return pool.submit(asyncio.run, _boxed(coro)).result().value  # type: ignore[no-any-return]


def iterate_sync(agen: AsyncIterator[T]) -> Iterator[T]:
    """Iterate an async generator from sync code, item by item, as items are produced.

    The generator runs on its own loop in a helper thread, so the work (and the lease
    renewal of a run) goes on while the caller handles an item; items cross over through a
    queue. Closing the iterator early cancels the generator and waits for it to clean up.
    """
    items: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
    loop = asyncio.new_event_loop()

    async def pump() -> None:
        _in_sync_call.set(True)
        try:
            async for item in agen:
                items.put((0, item))
        except BaseException as exc:
            items.put((1, exc))
        else:
            items.put((2, None))

    task = loop.create_task(pump())

    def drive() -> None:
        try:
            loop.run_until_complete(task)
        except BaseException:
            pass
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=drive, name="plait-stream", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == 0:
                yield value
            elif kind == 1:
                raise value
            else:
                return
    finally:
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop may have just closed
                loop.call_soon_threadsafe(task.cancel)
            thread.join()


@atexit.register
def _close_runners() -> None:
    with _lock:
        for r in _runners:
            with contextlib.suppress(Exception):
                r.close()
        _runners.clear()
