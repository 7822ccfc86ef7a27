"""``ctx.store``: the graph's memory store as one task attempt sees it.

A node's writes are not applied when it makes them: they are staged with the task (embedded
and checked at once, so a bad value fails the node, not the commit) and travel with its
result, so that they reach the store in the transaction that commits the step (see
:mod:`plait.engine.loop`): a task that re-runs after a crash never writes its memory twice, and
no other thread sees a memory before its step is committed. The node itself reads its own
staged writes back: ``get`` and ``search`` answer as if they were applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from plait._frozen import thaw
from plait.store import NOT_GIVEN, Item, MemoryWrite, NotGiven, SearchItem, Store
from plait.store.facade import SyncFacade
from plait.store.memory import search_page
from plait.store.records import StoredItem, from_micros
from plait.store.rules import matches
from plait.store.vectors import dot

__all__ = ["TaskStore"]


class TaskStore(SyncFacade):
    """The store API of :class:`plait.Store` for a node (``ctx.store``), its writes staged in
    ``staged`` (the task's list, committed with its step)."""

    __slots__ = ("_earlier", "_staged", "_store")

    def __init__(
        self, store: Store, staged: list[MemoryWrite], earlier: Callable[[], Sequence[MemoryWrite]] | None = None
    ) -> None:
        self._store = store
        self._staged = staged
        self._earlier = earlier
        """The run's earlier steps' memory writes not committed yet (async and exit
        durability): read as if they were, as the state of those steps is."""

    def __repr__(self) -> str:
        return f"TaskStore({self._store!r}, staged={len(self._staged)})"

    def _last(self) -> dict[tuple[tuple[str, ...], str], MemoryWrite]:
        """The write not yet in the store that counts for each key (the last one)."""
        earlier = self._earlier() if self._earlier is not None else ()
        return {(w.namespace, w.key): w for w in (*earlier, *self._staged)}

    # -- writes: staged ----------------------------------------------------------------------

    async def aput(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        *,
        index: Any = None,
        ttl: float | NotGiven | None = NOT_GIVEN,
    ) -> None:
        """Stage a put (see :meth:`plait.Store.aput`; None deletes): applied when the step commits."""
        self._staged.append(await self._store.prepare_write(namespace, key, value, index=index, ttl=ttl))

    async def adelete(self, namespace: Sequence[str], key: str) -> None:
        """Stage a delete (see :meth:`plait.Store.adelete`)."""
        self._staged.append(self._store.prepare_delete(namespace, key))

    # -- reads: the store, with the staged writes applied on top ------------------------------

    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """The item as the store would hold it with this task's staged writes applied."""
        # The writes not yet in the store are taken before the store is read: a commit that
        # lands during the read leaves its write in this copy (the store's answer may be older).
        w = self._last().get((tuple(namespace), key))
        stored = await self._store.aget(namespace, key, refresh_ttl=refresh_ttl)
        if w is None:
            return stored
        if w.value is None:
            return None
        created = stored.created_at if stored is not None else from_micros(w.at)
        return Item(
            namespace=w.namespace, key=w.key, value=thaw(w.value), created_at=created, updated_at=from_micros(w.at)
        )

    async def asearch(
        self,
        namespace_prefix: Sequence[str],
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        """:meth:`plait.Store.asearch` over the store with this task's staged writes applied."""
        search = await self._store.search_for(
            namespace_prefix, query=query, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh_ttl
        )
        n = len(search.prefix)
        mine = {k: w for k, w in self._last().items() if k[0][:n] == search.prefix}
        if not mine:
            rows = await self._store.backend.asearch_memory(search)
            return [r.to_search_item() for r in rows]
        # Ask the store for enough to fill the page whatever the staged writes replace.
        wide = replace(search, limit=search.offset + search.limit + len(mine), offset=0)
        rows = await self._store.backend.asearch_memory(wide)
        found: list[tuple[float | None, int, tuple[str, ...], str, Any, int]] = [
            (r.score, r.updated_at, r.namespace, r.key, r.value, r.created_at)
            for r in rows
            if (r.namespace, r.key) not in mine
        ]
        created = {(r.namespace, r.key): r.created_at for r in rows}
        for (ns, key), w in mine.items():
            if w.value is None or not matches(w.value, search.conditions):
                continue
            score = None
            if search.vector is not None:
                if not w.vectors:
                    continue
                score = max(dot(search.vector, v) for _, v in w.vectors)
            found.append((score, w.at, ns, key, w.value, created.get((ns, key), w.at)))
        page = search_page(
            found, lambda f: (f[0], f[1], f[2], f[3]), search.vector is not None, search.offset, search.limit
        )
        return [StoredItem(ns, key, value, c, u, score).to_search_item() for score, u, ns, key, value, c in page]

    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The store's namespaces (:meth:`plait.Store.alist_namespaces`), as committed: this
        task's staged writes are not counted until its step commits."""
        return await self._store.alist_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )
