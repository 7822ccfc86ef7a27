"""Node and task caching: results kept by input, as JSON text, in memory or in the
checkpointer's database (see docs/howto.md, "Cache a node's result").

- :class:`MemoryCache`: this process's memory;
- :class:`Cache`: the cache in a checkpointer's own store (``plait.Cache(cp)``, or
  ``cp.cache``): a table of its database on SQLite and PostgreSQL, a folder in a file
  store's, and this process's memory for the memory checkpointer;
- :func:`~plait.checkpoint.cache._core.lookup` / :func:`~plait.checkpoint.cache._core.store`:
  the one way in and out, for graph nodes (:mod:`plait.engine.caching`) and tasks alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plait.checkpoint.cache._base import MemoryCache, NodeCache
from plait.checkpoint.cache._core import MISS, cache_key, fn_identity, lookup, store

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer

__all__ = ["MISS", "Cache", "MemoryCache", "NodeCache", "cache_key", "fn_identity", "lookup", "store"]


def _backend(checkpointer: Checkpointer) -> NodeCache:
    """The checkpointer's own cache (:meth:`~plait.checkpoint.base.Checkpointer.open_cache`),
    made once and kept on it: a memory checkpointer's entries live as long as it does."""
    found: NodeCache | None = checkpointer.__dict__.get("_plait_node_cache")
    if found is None:
        found = checkpointer.__dict__["_plait_node_cache"] = checkpointer.open_cache()
    return found


class Cache(NodeCache):
    """The node cache in ``checkpointer``'s own store: ``compile(cp, cache=plait.Cache(cp))``,
    or ``compile(cp, cache=True)``. Entries outlive the process on SQLite, PostgreSQL and the
    file store (every process opening the database shares them), and expire by the
    checkpointer's clock (the lease clock its ``clock=`` sets).

    Raises:
        CacheUnsupportedError: a checkpointer of another kind (a third party's backend).
    """

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer
        self._impl = _backend(checkpointer)

    async def aget(self, namespace: str, key: str) -> str | None:
        return await self._impl.aget(namespace, key)

    async def aset(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        await self._impl.aset(namespace, key, value, ttl)

    async def aclear(self, namespaces: Sequence[str] | None = None) -> int:
        return await self._impl.aclear(namespaces)

    async def asweep(self) -> int:
        return await self._impl.asweep()

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Cache) and other._impl is self._impl

    def __hash__(self) -> int:
        return id(self._impl)

    def __repr__(self) -> str:
        return f"Cache({self._impl!r})"
