"""The records a memory backend stores and returns, and the protocol every backend implements.

A store write is staged by a node and committed with its step (see :mod:`plait.store`), so it
travels as data: a :class:`MemoryWrite` is JSON-ready (:meth:`MemoryWrite.to_json`), lives in
a task's pending result until its step commits, and carries everything the backend needs to
apply it (the time it was made, its time to live, its vectors): applying it again, after a
crash, gives the same row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from plait._frozen import thaw

__all__ = [
    "Condition",
    "Item",
    "MemoryBackend",
    "MemorySearch",
    "MemoryWrite",
    "NamespaceListing",
    "SearchItem",
    "StoredItem",
    "from_micros",
]

Namespace = tuple[str, ...]
Operator = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]


def from_micros(micros: int) -> datetime:
    """A timezone-aware UTC datetime from microseconds since the epoch (exact)."""
    seconds, rest = divmod(micros, 1_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest)


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """One put (``value`` a JSON object) or delete (``value`` None) of an item."""

    namespace: Namespace
    key: str
    value: Mapping[str, Any] | None
    at: int
    """When it was made: microseconds since the epoch. The item's ``updated_at`` (and its
    ``created_at`` when it is new); its expiry counts from here."""
    ttl: float | None = None
    """Minutes the item lives after :attr:`at` (and after each refreshing read); None: forever."""
    vectors: tuple[tuple[str, tuple[float, ...]], ...] | None = None
    """The item's embeddings, one per indexed field (unit length); None: not indexed."""

    def to_json(self) -> list[Any]:
        vectors = None if self.vectors is None else [[f, list(v)] for f, v in self.vectors]
        return [list(self.namespace), self.key, self.value, self.at, self.ttl, vectors]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> MemoryWrite:
        """The write :meth:`to_json` made.

        Raises:
            ValueError: any other shape (stored data from elsewhere).
        """
        if isinstance(data, list | tuple) and len(data) == 6:
            ns, key, value, at, ttl, vectors = data
            if (
                isinstance(ns, list | tuple)
                and all(type(label) is str for label in ns)
                and type(key) is str
                and (value is None or isinstance(value, Mapping))
                and type(at) is int
                and (ttl is None or (type(ttl) in (int, float)))
                and (vectors is None or isinstance(vectors, list | tuple))
            ):
                vecs = None
                if vectors is not None:
                    vecs = tuple((str(f), tuple(float(x) for x in v)) for f, v in vectors)
                return cls(tuple(ns), key, value, at, None if ttl is None else float(ttl), vecs)
        raise ValueError(f"a memory write must be [namespace, key, value, at, ttl, vectors], not {data!r:.80}")


@dataclass(frozen=True, slots=True)
class StoredItem:
    """An item as a backend returns it (times in microseconds since the epoch)."""

    namespace: Namespace
    key: str
    value: Mapping[str, Any]
    created_at: int
    updated_at: int
    score: float | None = None

    def to_item(self) -> Item:
        """The public record: the value thawed (the caller's own copy), times as UTC datetimes."""
        return Item(
            namespace=self.namespace,
            key=self.key,
            value=thaw(self.value),
            created_at=from_micros(self.created_at),
            updated_at=from_micros(self.updated_at),
        )

    def to_search_item(self) -> SearchItem:
        """:meth:`to_item` with the search's score."""
        return SearchItem(
            namespace=self.namespace,
            key=self.key,
            value=thaw(self.value),
            created_at=from_micros(self.created_at),
            updated_at=from_micros(self.updated_at),
            score=self.score,
        )


@dataclass(frozen=True, slots=True)
class Condition:
    """One test of a search filter: the value at ``path`` (keys into nested objects) compared
    with ``value`` by ``op``."""

    path: tuple[str, ...]
    op: Operator
    value: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySearch:
    """A search as a backend runs it: every condition must hold; items that expired at
    ``now`` are left out; with ``vector``, ranked by cosine similarity (best field) and items
    without a vector are left out; otherwise newest ``updated_at`` first, then namespace, key."""

    prefix: Namespace
    conditions: tuple[Condition, ...] = ()
    limit: int = 10
    offset: int = 0
    vector: tuple[float, ...] | None = None
    """The query's embedding, unit length."""
    now: int
    refresh: bool = False
    """Extend the expiry of every returned item that has a ttl, to ``now`` plus its ttl."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceListing:
    """A listing of namespaces that hold an unexpired item at ``now``: those matching every
    prefix and suffix (``"*"`` matches any one label), cut to ``max_depth`` labels, distinct,
    sorted, paged."""

    prefix: Namespace | None = None
    suffix: Namespace | None = None
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0
    now: int


class MemoryBackend(Protocol):
    """Where a :class:`~plait.store.Store` keeps its items: the in-memory backend, or a
    checkpointer that keeps its memory in its own database (so that a step's memory writes
    commit in the step's transaction)."""

    def check_memory(self) -> None:
        """Raise :class:`~plait.errors.StoreUnsupportedError` when it keeps no memory."""

    async def acommit(self, *, memory: Sequence[MemoryWrite] = ()) -> None:
        """Apply ``memory`` in order, atomically."""

    async def aget_memory(self, namespace: Namespace, key: str, *, now: int, refresh: bool) -> StoredItem | None:
        """The item, unless missing or expired at ``now`` (``refresh``: as :attr:`MemorySearch.refresh`)."""

    async def asearch_memory(self, search: MemorySearch) -> list[StoredItem]:
        """The items ``search`` finds, in its order."""

    async def alist_memory_namespaces(self, listing: NamespaceListing) -> list[Namespace]:
        """The namespaces ``listing`` finds."""

    async def asweep_memory(self, *, now: int) -> int:
        """Delete the items expired at ``now``; how many went."""


class Item:
    """A stored memory: its namespace and key, its value, and when it was first and last written."""

    __slots__ = ("created_at", "key", "namespace", "updated_at", "value")

    def __init__(
        self,
        *,
        namespace: Namespace,
        key: str,
        value: dict[str, Any],
        created_at: datetime,
        updated_at: datetime,
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.value = value
        """A plain dict of JSON data, the caller's own copy."""
        self.created_at = created_at
        """When the key was first written (an overwrite keeps it); UTC, microseconds."""
        self.updated_at = updated_at
        """When it was last written; UTC, microseconds."""

    def dict(self) -> dict[str, Any]:
        """JSON-ready: the namespace as a list, times as ISO 8601 text."""
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }

    def _fields(self) -> tuple[Any, ...]:
        return (self.namespace, self.key, self.value, self.created_at, self.updated_at)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Item)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((self.namespace, self.key))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespace={self.namespace!r}, key={self.key!r}, value={self.value!r})"


class SearchItem(Item):
    """An item a search found, with its ``score`` (cosine similarity to the query; None
    when the search had no query)."""

    __slots__ = ("score",)

    def __init__(
        self,
        *,
        namespace: Namespace,
        key: str,
        value: dict[str, Any],
        created_at: datetime,
        updated_at: datetime,
        score: float | None = None,
    ) -> None:
        super().__init__(namespace=namespace, key=key, value=value, created_at=created_at, updated_at=updated_at)
        self.score = score

    def dict(self) -> dict[str, Any]:
        return {**super().dict(), "score": self.score}

    def _fields(self) -> tuple[Any, ...]:
        return (*super()._fields(), self.score)
