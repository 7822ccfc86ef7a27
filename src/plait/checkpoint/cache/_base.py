"""What every node cache is: JSON text by ``(namespace, key)``, with an expiry by its clock.

A cache stores text the engine encoded from JSON data and hands back that text; it never
stores or reads back anything else (no pickle: LangGraph's cache unpickled what it read, and
whoever could write an entry could run code, CVE-2026-27794). Namespaces keep entries of
different nodes (or tasks) apart, and are what :meth:`NodeCache.aclear` removes.

Async core, sync facade: each backend implements the ``a`` methods; the sync ones wrap them.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from plait._sync import run_sync

__all__ = ["MemoryCache", "NodeCache"]


class NodeCache(ABC):
    """A cache of node and task results (``compile(cache=...)``): :class:`MemoryCache`, or
    :class:`~plait.checkpoint.cache.Cache` in a checkpointer's database."""

    @abstractmethod
    async def aget(self, namespace: str, key: str) -> str | None:
        """The JSON text stored under ``(namespace, key)``; None when absent or expired."""

    @abstractmethod
    async def aset(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        """Store ``value`` (JSON text) under ``(namespace, key)`` for ``ttl`` seconds (None:
        until cleared), replacing what was there."""

    @abstractmethod
    async def aclear(self, namespaces: Sequence[str] | None = None) -> int:
        """Remove the entries of ``namespaces`` (None: every entry); how many were removed."""

    @abstractmethod
    async def asweep(self) -> int:
        """Remove every expired entry (reads skip them anyway); how many were removed."""

    def get(self, namespace: str, key: str) -> str | None:
        """Sync :meth:`aget`."""
        return run_sync(self.aget(namespace, key))

    def set(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        """Sync :meth:`aset`."""
        run_sync(self.aset(namespace, key, value, ttl))

    def clear(self, namespaces: Sequence[str] | None = None) -> int:
        """Sync :meth:`aclear`."""
        return run_sync(self.aclear(namespaces))

    def sweep(self) -> int:
        """Sync :meth:`asweep`."""
        return run_sync(self.asweep())


class MemoryCache(NodeCache):
    """A node cache in this process's memory (``compile(cache=plait.MemoryCache())``):
    gone when the process ends. An expired entry is deleted when it is read.

    Args:
        clock: unix seconds, for expiry; tests pass one they advance by hand.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._entries: dict[str, dict[str, tuple[str, float | None]]] = {}
        self._lock = threading.Lock()  # the sync facade may call from other threads

    async def aget(self, namespace: str, key: str) -> str | None:
        with self._lock:
            entries = self._entries.get(namespace, {})
            found = entries.get(key)
            if found is None:
                return None
            value, expires = found
            if expires is not None and expires <= self.clock():
                del entries[key]
                return None
            return value

    async def aset(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        expires = None if ttl is None else self.clock() + ttl
        with self._lock:
            self._entries.setdefault(namespace, {})[key] = (value, expires)

    async def aclear(self, namespaces: Sequence[str] | None = None) -> int:
        with self._lock:
            if namespaces is None:
                removed = sum(len(e) for e in self._entries.values())
                self._entries.clear()
                return removed
            return sum(len(self._entries.pop(ns, {})) for ns in set(namespaces))

    async def asweep(self) -> int:
        now = self.clock()
        removed = 0
        with self._lock:
            for entries in self._entries.values():
                old = [k for k, (_, expires) in entries.items() if expires is not None and expires <= now]
                for k in old:
                    del entries[k]
                removed += len(old)
        return removed

    def __repr__(self) -> str:
        return f"MemoryCache({sum(len(e) for e in self._entries.values())} entries)"
