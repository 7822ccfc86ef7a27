"""Memory items in this process's dictionaries: the backend of ``plait.Store()`` and of
:class:`~plait.checkpoint.MemoryCheckpointer` (which applies a step's memory writes under the
same lock as its checkpoint, so the two change together).

Also the reference: the SQL backends return what this one returns for the same calls, and
the shared tests hold them to it.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from plait.store.records import MemorySearch, MemoryWrite, Namespace, NamespaceListing, StoredItem
from plait.store.rules import matches
from plait.store.vectors import dot

__all__ = ["MemoryItems", "search_page", "namespace_matches", "pick_namespaces"]

MICROS_PER_MINUTE = 60_000_000
T = TypeVar("T")


@dataclass(slots=True)
class _Row:
    value: Mapping[str, Any]
    created: int
    updated: int
    expires: int | None
    ttl: float | None
    vectors: tuple[tuple[str, tuple[float, ...]], ...] | None


def expiry(at: int, ttl: float | None) -> int | None:
    """When an item written (or read with a refresh) at ``at`` expires."""
    return None if ttl is None else at + round(ttl * MICROS_PER_MINUTE)


def namespace_matches(ns: Namespace, prefix: Namespace | None, suffix: Namespace | None) -> bool:
    """Whether ``ns`` starts with ``prefix`` and ends with ``suffix`` (``"*"``: any label)."""
    if prefix and (len(ns) < len(prefix) or any(p not in ("*", label) for p, label in zip(prefix, ns, strict=False))):
        return False
    if suffix:
        tail = ns[len(ns) - len(suffix) :] if len(ns) >= len(suffix) else None
        if tail is None or any(s not in ("*", label) for s, label in zip(suffix, tail, strict=True)):
            return False
    return True


def pick_namespaces(found: Sequence[Namespace], listing: NamespaceListing) -> list[Namespace]:
    """What a listing returns from the namespaces that hold an unexpired item: matched,
    cut to ``max_depth``, distinct, sorted, paged (every backend ends with this)."""
    out = {
        ns[: listing.max_depth] if listing.max_depth is not None else ns
        for ns in found
        if namespace_matches(ns, listing.prefix, listing.suffix)
    }
    return sorted(out)[listing.offset : listing.offset + listing.limit]


def search_page(
    found: Iterable[T],
    parts: Callable[[T], tuple[float | None, int, Namespace, str]],
    scored: bool,
    offset: int,
    limit: int,
) -> list[T]:
    """The page of ``found`` a search returns, in the order every backend gives: by score
    (``scored``: a query's), else newest ``updated_at`` first; ties by namespace, then key.
    ``parts`` gives an entry's ``(score, updated_at, namespace, key)``. Only the page's
    entries are ordered (a heap of ``offset + limit``), not every match."""
    if scored:
        key: Callable[[T], tuple[Any, ...]] = lambda f: (-(parts(f)[0] or 0.0), parts(f)[2], parts(f)[3])  # noqa: E731
    else:
        key = lambda f: (-parts(f)[1], parts(f)[2], parts(f)[3])  # noqa: E731
    return heapq.nsmallest(offset + limit, found, key=key)[offset:]


class MemoryItems:
    """Items in dictionaries, behind a lock (reads may come from several threads)."""

    def __init__(self) -> None:
        self._items: dict[Namespace, dict[str, _Row]] = {}
        self.lock = threading.Lock()
        """Held by every call; :meth:`apply_locked` expects the caller to hold it."""

    def check_memory(self) -> None:
        return None

    # -- writes ----------------------------------------------------------------------------

    def apply_locked(self, writes: Sequence[MemoryWrite]) -> None:
        """Apply ``writes`` in order; the caller holds :attr:`lock`."""
        items = self._items
        for w in writes:
            rows = items.get(w.namespace)
            if w.value is None:
                if rows is not None and rows.pop(w.key, None) is not None and not rows:
                    del items[w.namespace]
                continue
            if rows is None:
                rows = items[w.namespace] = {}
            old = rows.get(w.key)
            created = old.created if old is not None and (old.expires is None or old.expires > w.at) else w.at
            rows[w.key] = _Row(w.value, created, w.at, expiry(w.at, w.ttl), w.ttl, w.vectors)

    async def acommit(self, *, memory: Sequence[MemoryWrite] = ()) -> None:
        with self.lock:
            self.apply_locked(memory)

    # -- reads -----------------------------------------------------------------------------

    @staticmethod
    def _item(ns: Namespace, key: str, row: _Row, score: float | None = None) -> StoredItem:
        return StoredItem(ns, key, row.value, row.created, row.updated, score)

    async def aget_memory(self, namespace: Namespace, key: str, *, now: int, refresh: bool) -> StoredItem | None:
        with self.lock:
            row = self._items.get(namespace, {}).get(key)
            if row is None or (row.expires is not None and row.expires <= now):
                return None
            if refresh and row.ttl is not None:
                row.expires = expiry(now, row.ttl)
            return self._item(namespace, key, row)

    async def asearch_memory(self, search: MemorySearch) -> list[StoredItem]:
        now, prefix, n = search.now, search.prefix, len(search.prefix)
        with self.lock:
            found: list[tuple[Namespace, str, _Row, float | None]] = []
            for ns, rows in self._items.items():
                if ns[:n] != prefix:
                    continue
                for key, row in rows.items():
                    if row.expires is not None and row.expires <= now:
                        continue
                    if search.conditions and not matches(row.value, search.conditions):
                        continue
                    score = None
                    if search.vector is not None:
                        if not row.vectors:
                            continue
                        score = max(dot(search.vector, v) for _, v in row.vectors)
                    found.append((ns, key, row, score))
            page = search_page(
                found,
                lambda f: (f[3], f[2].updated, f[0], f[1]),
                search.vector is not None,
                search.offset,
                search.limit,
            )
            if search.refresh:
                for _, _, row, _ in page:
                    if row.ttl is not None:
                        row.expires = expiry(now, row.ttl)
            return [self._item(ns, key, row, score) for ns, key, row, score in page]

    async def alist_memory_namespaces(self, listing: NamespaceListing) -> list[Namespace]:
        now = listing.now
        with self.lock:
            live = [
                ns
                for ns, rows in self._items.items()
                if any(r.expires is None or r.expires > now for r in rows.values())
            ]
        return pick_namespaces(live, listing)

    async def asweep_memory(self, *, now: int) -> int:
        gone = 0
        with self.lock:
            for ns in list(self._items):
                rows = self._items[ns]
                for key in [k for k, r in rows.items() if r.expires is not None and r.expires <= now]:
                    del rows[key]
                    gone += 1
                if not rows:
                    del self._items[ns]
        return gone

    def count(self) -> int:
        """How many items are held, expired or not (for tests and the CLI)."""
        with self.lock:
            return sum(len(rows) for rows in self._items.values())
