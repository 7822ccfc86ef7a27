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
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["run_sync"]

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


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result, from sync code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _runner().run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="plait-sync") as pool:
        return pool.submit(asyncio.run, coro).result()


@atexit.register
def _close_runners() -> None:
    with _lock:
        for r in _runners:
            with contextlib.suppress(Exception):
                r.close()
        _runners.clear()
