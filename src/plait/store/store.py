"""``plait.Store``: long-term memory across threads, one async implementation with a sync twin
of every method.

A store is a facade over a backend (:class:`~plait.store.records.MemoryBackend`): the
in-memory one, or a checkpointer that keeps items in its own database. Everything that does
not depend on where items live is done here, once: checking namespaces, keys and values,
the time to live, embedding a put's fields and a search's query, parsing filters, and
turning stored rows into :class:`Item` records. A write becomes a
:class:`~plait.store.records.MemoryWrite` first, which a graph's node stages with its task
(see :meth:`Store.prepare_put`) and the step commits with its checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict

from plait._sync import run_sync
from plait.errors import EmbeddingError, InvalidMemoryError
from plait.store.facade import SyncFacade
from plait.store.memory import MemoryItems
from plait.store.ops import NOT_GIVEN, GetOp, ListNamespacesOp, NotGiven, Op, PutOp, SearchOp
from plait.store.records import (
    Item,
    MemoryBackend,
    MemorySearch,
    MemoryWrite,
    Namespace,
    NamespaceListing,
    SearchItem,
)
from plait.store.rules import (
    check_key,
    check_namespace,
    check_page,
    check_prefix,
    check_ttl,
    check_value,
    parse_filter,
)
from plait.store.vectors import Index, IndexConfig, check_fields, texts_of

__all__ = ["Store", "TTLConfig"]


class TTLConfig(TypedDict, total=False):
    """``Store(..., ttl=...)``: how long items live (minutes, as LangGraph's)."""

    default_ttl: float | None
    """Minutes an item lives when a put gives no ``ttl`` (None: forever, the default)."""
    refresh_on_read: bool
    """Whether a read (get, search) extends the life of what it returns (default True)."""
    sweep_interval_minutes: int | None
    """How often ``plait worker`` and ``plait serve`` delete expired items (None: the
    default, 60 minutes). Expired items are invisible at once either way."""


def _conditions(op: ListNamespacesOp) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """The prefix and suffix a :class:`ListNamespacesOp`'s match conditions name."""
    prefix = suffix = None
    for cond in op.match_conditions or ():
        if cond.match_type == "prefix":
            prefix = tuple(cond.path)
        elif cond.match_type == "suffix":
            suffix = tuple(cond.path)
        else:
            raise ValueError(f"match_type={cond.match_type!r}: use 'prefix' or 'suffix'")
    return prefix, suffix


class Store(SyncFacade):
    """Long-term memory: JSON objects under ``(namespace, key)``, shared by every thread.

    Args:
        backend: where items live. None: in this process's memory. A checkpointer that keeps
            memory (memory, SQLite, PostgreSQL) keeps items in its own database, and a graph
            compiled with both commits each step's memory writes in the step's transaction
            (``checkpointer.store`` is this store with default options).
        index: semantic search (:class:`~plait.store.vectors.IndexConfig`): ``{"dims": N,
            "embed": fn, "fields": ["text"]}``.
        ttl: default time to live and refresh (:class:`TTLConfig`).
        clock: unix seconds (tests pass one they move by hand).

    Raises:
        StoreUnsupportedError: the backend keeps no memory (the file checkpointer).
        EmbeddingError: an ``index`` that is not one.
    """

    def __init__(
        self,
        backend: MemoryBackend | None = None,
        *,
        index: IndexConfig | Mapping[str, Any] | None = None,
        ttl: TTLConfig | Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if backend is None:
            backend = MemoryItems()
        backend.check_memory()
        self.backend: MemoryBackend = backend
        self.index = Index(index) if index is not None else None
        ttl = dict(ttl or {})
        unknown = set(ttl) - {"default_ttl", "refresh_on_read", "sweep_interval_minutes"}
        if unknown:
            raise InvalidMemoryError(
                None,
                None,
                f"ttl options {sorted(unknown)} are not known (default_ttl, refresh_on_read, sweep_interval_minutes)",
            )
        self.default_ttl = check_ttl(None, None, ttl.get("default_ttl"))
        self.refresh_on_read = bool(ttl.get("refresh_on_read", True))
        interval = ttl.get("sweep_interval_minutes")
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0
        ):
            raise InvalidMemoryError(
                None, None, f"sweep_interval_minutes={interval!r}: give minutes (a positive number)"
            )
        self.sweep_interval_minutes: float = float(interval) if interval is not None else 60.0
        self.clock = clock

    def over(self, backend: MemoryBackend) -> Store:
        """A store with these options (index, ttl, clock) over another backend: a graph's
        store follows its checkpointer when ``bind()`` gives it another."""
        other = Store.__new__(Store)
        other.__dict__.update(self.__dict__)
        backend.check_memory()
        other.backend = backend
        return other

    def __repr__(self) -> str:
        return f"Store({self.backend!r})" if not isinstance(self.backend, MemoryItems) else "Store(in memory)"

    def now(self) -> int:
        """The store's clock in microseconds since the epoch."""
        return round(self.clock() * 1_000_000)

    def _refresh(self, refresh_ttl: bool | None) -> bool:
        return self.refresh_on_read if refresh_ttl is None else bool(refresh_ttl)

    # -- writes, as records (a graph's node stages these) -----------------------------------

    async def prepare_put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        *,
        index: Any = None,
        ttl: float | NotGiven | None = NOT_GIVEN,
    ) -> MemoryWrite:
        """The write ``put`` makes, checked and embedded, not yet applied.

        Raises:
            InvalidNamespaceError, InvalidMemoryError: what the store cannot hold.
            EmbeddingError: the index's embed function failed.
        """
        ns = check_namespace(namespace)
        key = check_key(ns, key)
        frozen = check_value(ns, key, value)
        minutes = self.default_ttl if isinstance(ttl, NotGiven) else check_ttl(ns, key, ttl)
        vectors = await self._vectors(ns, key, frozen, index)
        return MemoryWrite(ns, key, frozen, self.now(), minutes, vectors)

    async def prepare_write(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        *,
        index: Any = None,
        ttl: float | NotGiven | None = NOT_GIVEN,
    ) -> MemoryWrite:
        """:meth:`prepare_put`, or :meth:`prepare_delete` when ``value`` is None."""
        if value is None:
            return self.prepare_delete(namespace, key)
        return await self.prepare_put(namespace, key, value, index=index, ttl=ttl)

    def prepare_delete(self, namespace: Sequence[str], key: str) -> MemoryWrite:
        """The write ``delete`` makes."""
        ns = check_namespace(namespace)
        return MemoryWrite(ns, check_key(ns, key), None, self.now())

    async def _vectors(
        self, ns: Namespace, key: str, value: Mapping[str, Any], index: Any
    ) -> tuple[tuple[str, tuple[float, ...]], ...] | None:
        if index is False:
            return None
        if self.index is None:
            if index is None:
                return None
            raise InvalidMemoryError(
                ns,
                key,
                f"index={index!r} names fields to embed, but this store has no index: "
                "Store(..., index={'dims': N, 'embed': fn})",
            )
        try:
            fields = self.index.fields if index is None else check_fields(index, "put index")
        except EmbeddingError as exc:
            raise InvalidMemoryError(ns, key, str(exc)) from None
        texts = texts_of(value, fields)
        if not texts:
            return None
        vectors = await self.index.vectors([t for _, t in texts])
        return tuple((field, vec) for (field, _), vec in zip(texts, vectors, strict=True))

    # -- the API ----------------------------------------------------------------------------

    async def aput(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        *,
        index: Any = None,
        ttl: float | NotGiven | None = NOT_GIVEN,
    ) -> None:
        """Store ``value`` (a JSON object) under ``key`` in ``namespace``, replacing what was there.

        Args:
            index: None: embed the store's index fields (when it has an index); False: no
                vector for this item; a list of dotted paths: embed these fields instead.
            ttl: minutes the item lives (None: forever; not given: the store's default).

        ``value=None`` deletes the item (as LangGraph's ``put`` does).
        """
        await self.backend.acommit(memory=[await self.prepare_write(namespace, key, value, index=index, ttl=ttl)])

    async def adelete(self, namespace: Sequence[str], key: str) -> None:
        """Remove the item (nothing happens when there is none)."""
        await self.backend.acommit(memory=[self.prepare_delete(namespace, key)])

    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """The item, or None when there is none or it expired."""
        ns = check_namespace(namespace)
        row = await self.backend.aget_memory(ns, check_key(ns, key), now=self.now(), refresh=self._refresh(refresh_ttl))
        return None if row is None else row.to_item()

    async def search_for(
        self,
        namespace_prefix: Sequence[str],
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> MemorySearch:
        """The backend's search for these arguments (the query embedded)."""
        prefix = check_prefix(namespace_prefix)
        limit, offset = check_page(limit, offset)
        conditions = parse_filter(filter)
        vector = None
        if query is not None:
            if self.index is None:
                raise EmbeddingError(
                    "search(query=...) ranks by meaning, which needs an index: "
                    "Store(..., index={'dims': N, 'embed': fn, 'fields': [...]})"
                )
            if type(query) is not str:
                raise EmbeddingError(f"query={query!r}: give the text to search for")
            (vector,) = await self.index.vectors([query])
        return MemorySearch(
            prefix=prefix,
            conditions=conditions,
            limit=limit,
            offset=offset,
            vector=vector,
            now=self.now(),
            refresh=self._refresh(refresh_ttl),
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
        """Items under ``namespace_prefix`` (``()``: all), newest first, or with ``query`` the
        closest in meaning first (items with no vector left out); ``filter`` keeps items
        whose value matches (see :mod:`plait.store.rules`)."""
        search = await self.search_for(
            namespace_prefix, query=query, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh_ttl
        )
        return [r.to_search_item() for r in await self.backend.asearch_memory(search)]

    def listing_for(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> NamespaceListing:
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1):
            raise ValueError(f"max_depth={max_depth!r}: give a number of labels, 1 or more, or None")
        limit, offset = check_page(limit, offset)
        return NamespaceListing(
            prefix=None if prefix is None else check_prefix(prefix),
            suffix=None if suffix is None else check_prefix(suffix),
            max_depth=max_depth,
            limit=limit,
            offset=offset,
            now=self.now(),
        )

    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces that hold an item, sorted: those starting with ``prefix`` and ending
        with ``suffix`` (a ``"*"`` label matches any), cut to ``max_depth`` labels, distinct."""
        listing = self.listing_for(prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset)
        return await self.backend.alist_memory_namespaces(listing)

    async def asweep(self) -> int:
        """Delete the items that expired; how many went. (Expired items are invisible to
        every read already; this gives their space back.)"""
        return await self.backend.asweep_memory(now=self.now())

    async def abatch(self, ops: Iterable[Op]) -> list[Any]:
        """Run ``ops`` (:class:`GetOp`, :class:`SearchOp`, :class:`ListNamespacesOp`,
        :class:`PutOp`) and return one result per op, in order (None for a put).

        The reads see the store as it was before the batch; the puts are applied together
        at the end, in one atomic commit, the last put of a key winning.
        """
        ops = list(ops)
        results: list[Any] = [None] * len(ops)
        writes: dict[tuple[Namespace, str], MemoryWrite] = {}
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                w = await self.prepare_write(op.namespace, op.key, op.value, index=op.index, ttl=op.ttl)
                writes.pop((w.namespace, w.key), None)
                writes[(w.namespace, w.key)] = w
            elif isinstance(op, GetOp):
                results[i] = await self.aget(op.namespace, op.key, refresh_ttl=op.refresh_ttl)
            elif isinstance(op, SearchOp):
                results[i] = await self.asearch(
                    op.namespace_prefix,
                    query=op.query,
                    filter=op.filter,
                    limit=op.limit,
                    offset=op.offset,
                    refresh_ttl=op.refresh_ttl,
                )
            elif isinstance(op, ListNamespacesOp):
                prefix, suffix = _conditions(op)
                results[i] = await self.alist_namespaces(
                    prefix=prefix, suffix=suffix, max_depth=op.max_depth, limit=op.limit, offset=op.offset
                )
            else:
                raise TypeError(f"batch takes GetOp, SearchOp, PutOp and ListNamespacesOp records, not {op!r:.60}")
        if writes:
            await self.backend.acommit(memory=list(writes.values()))
        return results

    async def aclose(self) -> None:
        """Nothing to release: a store borrows its backend (close the checkpointer itself)."""

    # -- the sync facade ---------------------------------------------------------------------

    def sweep(self) -> int:
        """Sync :meth:`asweep`."""
        return run_sync(self.asweep())

    def batch(self, ops: Iterable[Op]) -> list[Any]:
        """Sync :meth:`abatch`."""
        return run_sync(self.abatch(ops))

    def close(self) -> None:
        """Sync :meth:`aclose`."""
