"""The sync facade's one trick: run a coroutine to completion from plain code.

Each thread keeps one event loop for its sync calls, so repeated ``invoke()`` calls do not
pay for a new loop each time. Called from inside a running loop (a notebook, an async
framework), the coroutine runs on a helper thread instead, because a loop cannot block on
itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import queue
import signal
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["drain_items", "in_sync_call", "iterate_sync", "on_loop_thread", "pump_items", "run_sync", "settle"]

T = TypeVar("T")
_local = threading.local()
_loops: list[asyncio.AbstractEventLoop] = []
_lock = threading.Lock()
_signal: Any = getattr(signal, "_signal", signal)
"""The C module behind :mod:`signal`: its functions take and return handlers as they are,
where the wrappers first try to turn each into an enum, which fails (an exception) for a
function, at a cost a sync call would pay four times (figures in docs/benchmarks.md)."""


def _loop() -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _local.loop = loop
        with _lock:
            _loops.append(loop)
    return loop


class _Interrupt:
    """The SIGINT handler while a sync call runs on the main thread, as in
    ``asyncio.Runner``: the first Ctrl-C cancels the call's task (so that its cleanup runs
    and a run releases its lease), a second one raises KeyboardInterrupt where the code is.

    Not ``asyncio.Runner`` itself: Python 3.11's formats its task (``repr``, coroutine and
    frame included) whenever it puts the default handler back, on every call; this handler's
    ``repr`` is a constant.
    """

    __slots__ = ("count", "loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self.loop = loop
        self.task = task
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.count == 1 and not self.task.done():
            self.task.cancel()
            self.loop.call_soon_threadsafe(lambda: None)  # wake the loop if it waits in select()
            return
        raise KeyboardInterrupt

    def __repr__(self) -> str:
        return "<plait SIGINT handler>"


def _run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on ``loop`` (this thread's), with Ctrl-C handled."""
    task = loop.create_task(coro)
    handler: _Interrupt | None = None
    if (
        threading.current_thread() is threading.main_thread()
        and _signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ):
        handler = _Interrupt(loop, task)
        _signal.signal(signal.SIGINT, handler)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if handler is not None and handler.count > 0 and task.uncancel() == 0:
            raise KeyboardInterrupt from None
        raise
    except BaseException:
        # A second Ctrl-C (or an error raised by the loop itself) left the task unfinished:
        # cancel it and let its cleanup run now, or it would resume inside the next call.
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise
    finally:
        if handler is not None and _signal.getsignal(signal.SIGINT) is handler:
            _signal.signal(signal.SIGINT, signal.default_int_handler)


_in_sync_call: contextvars.ContextVar[bool] = contextvars.ContextVar("plait_in_sync_call", default=False)


def in_sync_call() -> bool:
    """Whether the running code was started by the sync facade, on a loop of its own: then
    nothing else runs on that loop but this call, which a caller blocks on anyway, so a
    backend may do blocking I/O right there (see ``plait.checkpoint.sql._caller``)."""
    return _in_sync_call.get()


def on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is the one running ``loop``. Asked of the thread, not the
    loop: a loop that does not record its thread (uvloop, which ``plait serve`` runs on) would
    otherwise be "elsewhere" from its own thread, and a hop to it by ``call_soon_threadsafe``
    would hop again forever."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs on this thread
        return False


async def _flagged(coro: Coroutine[Any, Any, T]) -> T:
    _in_sync_call.set(True)  # this task's context only
    return await coro


def settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Hand a job a worker thread ran back to the caller waiting on ``future`` (called on the
    caller's loop, through ``call_soon_threadsafe``), unless the caller stopped waiting: the
    work itself still completed or failed."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result, from sync code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(_loop(), _flagged(coro))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="plait-sync") as pool:
        return pool.submit(asyncio.run, _flagged(coro)).result()


async def pump_items(agen: AsyncIterator[Any], items: queue.SimpleQueue[tuple[int, Any]]) -> None:
    """Put ``agen``'s items into ``items`` as it produces them, then its end or its error:
    the async half of a stream that sync code reads with :func:`drain_items`."""
    try:
        async for item in agen:
            items.put((0, item))
    except BaseException as exc:
        items.put((1, exc))
    else:
        items.put((2, None))


def drain_items(items: queue.SimpleQueue[tuple[int, Any]]) -> Iterator[Any]:
    """The items :func:`pump_items` puts, as they come; re-raises the stream's error."""
    while True:
        kind, value = items.get()
        if kind == 0:
            yield value
        elif kind == 1:
            raise value
        else:
            return


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
        await pump_items(agen, items)

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
        yield from drain_items(items)
    finally:
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop may have just closed
                loop.call_soon_threadsafe(task.cancel)
            thread.join()


@atexit.register
def _close_loops() -> None:
    with _lock:
        loops = list(_loops)
        _loops.clear()
    for loop in loops:
        with contextlib.suppress(Exception):
            _close(loop)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Close a thread's loop as ``asyncio.Runner.close`` would: cancel the tasks left, then
    finish async generators and the default executor."""
    if loop.is_closed() or loop.is_running():
        return
    try:
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
