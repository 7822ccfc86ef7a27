"""A clock a test advances by hand, for leases that must expire without waiting."""

from __future__ import annotations

import threading
import time

__all__ = ["ManualClock"]


class ManualClock:
    """A lease clock (unix seconds) that only moves when told to.

    Pass it as ``clock=`` to a checkpointer (every checkpointer that shares a store, or the
    processes sharing it, must use the same time), then :meth:`advance` it past a lease's
    life to make the lease expire at once, on a machine however loaded. Thread-safe: a run's
    lease is renewed from another thread.

    Example::

        clock = ManualClock()
        checkpointer = MemoryCheckpointer(clock=clock)
        lease = checkpointer.take_lease("t", "A")
        clock.advance(checkpointer.lease_ttl + 1)   # A's lease has expired
        checkpointer.take_lease("t", "B")           # taken over: A's writes are refused from now on
    """

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds``; returns the new time."""
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        with self._lock:
            self._now += seconds
            return self._now
