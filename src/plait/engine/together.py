"""Running a super-step's tasks together: each node call as its own asyncio task, their
results in planned order."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

__all__ = ["run_all"]

_T = TypeVar("_T")


async def run_all(coros: Iterable[Coroutine[Any, Any, _T]], *, limit: int | None = None) -> list[_T]:
    """Run a super-step's tasks concurrently; their results in the order given.

    ``asyncio.gather`` does this with a third more overhead per task (its gathering future
    and per-child bookkeeping), and a fan-out of a hundred Sends spends most of its engine
    time starting tasks. As with gather, cancelling the caller cancels every task and waits
    for them to end before the CancelledError reaches it. Unlike gather, a task that raises
    (tasks report node failures in their outcome; only a BaseException such as a
    cancellation gets here) does not return control while its siblings still run.

    ``limit`` (a run's ``max_concurrency``) caps how many run at once; the others wait
    their turn in order.

    The caller waits for one unfinished task at a time, in order, instead of each task
    calling back when it ends: in a wide step most tasks have ended by the time the caller
    looks at them (they all ran in the loop turn that finished the first), so a fan-out of a
    hundred pays for one or a few wake-ups instead of a hundred callbacks.
    """
    if limit is not None:
        coros = _capped(coros, limit)
    loop = asyncio.get_running_loop()
    tasks = _start(loop, coros)
    for task in tasks:
        if task.done():
            continue
        waiter: asyncio.Future[None] = loop.create_future()
        task.add_done_callback(functools.partial(_wake, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            running = [t for t in tasks if not t.done()]
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running)
            raise
    for task in tasks:  # mark every failure retrieved; the first one is raised below
        if not task.cancelled():
            task.exception()
    return [task.result() for task in tasks]


def _wake(waiter: asyncio.Future[None], _task: asyncio.Task[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _capped(coros: Iterable[Coroutine[Any, Any, _T]], limit: int) -> list[Coroutine[Any, Any, _T]]:
    """``coros``, each waiting for one of ``limit`` slots before it starts."""
    slots = asyncio.Semaphore(limit)

    async def in_slot(coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            async with slots:
                return await coro
        finally:
            coro.close()  # one cancelled before its turn never started: no "never awaited"

    return [in_slot(c) for c in coros]


def _start(loop: asyncio.AbstractEventLoop, coros: Iterable[Coroutine[Any, Any, _T]]) -> list[asyncio.Task[_T]]:
    """Tasks for ``coros``. From Python 3.12 each starts eagerly: it runs at once, as its own
    task (``current_task()``, and so ``asyncio.timeout()``, see it), up to its first real
    wait; a node that never waits finishes without a trip through the event loop. Python
    3.11 has no eager start that keeps ``current_task()`` right, so there they are scheduled."""
    if sys.version_info >= (3, 12):
        return [asyncio.Task(c, loop=loop, eager_start=True) for c in coros]
    return [loop.create_task(c) for c in coros]
