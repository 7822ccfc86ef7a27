"""What the long-term memory store (:class:`plait.Store`) refuses (see :mod:`plait.errors`)."""

from __future__ import annotations

from typing import Any

from plait.errors._base import PlaitError

__all__ = [
    "EmbeddingError",
    "InvalidMemoryError",
    "InvalidNamespaceError",
    "MemoryFilterError",
    "MemoryStoreError",
    "NoStoreError",
    "StoreUnsupportedError",
]


class MemoryStoreError(PlaitError):
    """The memory store refused a call or failed."""


class InvalidNamespaceError(MemoryStoreError, ValueError):
    """A namespace that is not a tuple of non-empty text labels without ``.`` or NUL."""

    def __init__(self, namespace: Any, why: str) -> None:
        self.namespace = namespace
        super().__init__(
            f"namespace {namespace!r} cannot be used: {why}. A namespace is a tuple of non-empty "
            'labels such as ("users", "u42", "memories"); a label holds no "." and no NUL character.'
        )


class InvalidMemoryError(MemoryStoreError, ValueError):
    """A key, value, ttl or index option of a put that the store cannot hold."""

    def __init__(self, namespace: tuple[str, ...] | None, key: Any, why: str) -> None:
        self.namespace = namespace
        self.key = key
        where = f"item {key!r} of namespace {namespace!r}" if namespace is not None else f"item {key!r}"
        super().__init__(f"{where} cannot be stored: {why}")


class MemoryFilterError(MemoryStoreError, ValueError):
    """A search ``filter`` the store cannot run (an unknown operator, a path it cannot name)."""

    def __init__(self, filter: Any, why: str) -> None:
        self.filter = filter
        super().__init__(
            f"search filter {filter!r} cannot be used: {why}. A filter maps a key (dotted for nested "
            'keys, "profile.city") to a value, or to {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": value}.'
        )


class NoStoreError(MemoryStoreError):
    """``ctx.store`` in a node of a graph compiled without a store."""

    def __init__(self, node: str) -> None:
        self.node = node
        super().__init__(
            f"node {node!r} used ctx.store, but its graph was compiled without a store: pass one, "
            "graph.compile(checkpointer=cp, store=cp.store) (the memory shares the checkpointer's "
            "database and is committed with each step), or store=plait.Store() for memory in this process."
        )


class StoreUnsupportedError(MemoryStoreError):
    """A memory store asked of a backend that keeps none (the file checkpointer)."""

    def __init__(self, backend: str, why: str) -> None:
        self.backend = backend
        super().__init__(f"{backend} keeps no memory store: {why}")


class EmbeddingError(MemoryStoreError):
    """The index's embed function failed or returned something other than one vector of
    ``dims`` numbers per text; or a semantic search was asked of a store with no index."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
