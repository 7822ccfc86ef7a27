"""The sync facade of a ``Runs``: every sync call runs on one event loop of its own, in a thread.

Why not :func:`plait._sync.run_sync` as elsewhere: a ``Runs`` holds an async connection pool,
which belongs to the loop it was opened on. ``run_sync`` runs a call on the calling thread's
loop, or, inside a running loop (a notebook, an async framework), on a fresh loop per call;
``iterate_sync`` runs a stream on a fresh loop. The pool would then be used from loops it
does not belong to. A portal keeps one loop for the object's whole life, whoever calls it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from plait._sync import drain_items, pump_items

__all__ = ["Portal"]

T = TypeVar("T")


class Portal:
    """A daemon thread running one event loop; sync code hands it coroutines and streams."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="plait-runs", daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and return its result (or raise its error)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Items of ``agen`` as the portal's loop produces them; closing early cancels it."""
        items: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        future = asyncio.run_coroutine_threadsafe(pump_items(agen, items), self.loop)
        try:
            yield from drain_items(items)
        finally:
            if not future.done():
                future.cancel()

    def close(self) -> None:
        """Stop the loop and its thread (after the last call)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
