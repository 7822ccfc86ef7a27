"""Where a sync node's call runs: the executor seam.

A sync node (a plain ``def``) runs off the event loop so that it cannot block the loop's other
tasks or the lease renewal. Any object with ``submit(fn)`` will do, so a worker can give its
own bounded pool, an application its pool with its own thread names and limits, and a test a
pool it can inspect; ``concurrent.futures.ThreadPoolExecutor`` is one. The default is one
shared pool per process (no thread start-up per run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

__all__ = ["NodeExecutor", "default_executor"]


class NodeExecutor(Protocol):
    """Runs ``fn()`` soon, on a thread other than the event loop's; what it returns is
    ignored (the result comes back through ``fn`` itself)."""

    def submit(self, fn: Callable[[], None], /) -> object: ...


_default: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def default_executor() -> ThreadPoolExecutor:
    """The shared pool sync nodes run in unless the graph was compiled with an executor."""
    global _default
    with _lock:
        if _default is None:
            _default = ThreadPoolExecutor(max_workers=32, thread_name_prefix="plait-node")
        return _default
