"""The sync twin of every store method, written once for :class:`plait.Store` and for
``ctx.store`` (:class:`plait.engine.task_store.TaskStore`): each one line over its async
original, as everywhere in plait."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from plait._sync import run_sync
from plait.store.ops import NOT_GIVEN, NotGiven
from plait.store.records import Item, SearchItem

__all__ = ["SyncFacade"]


class SyncFacade(ABC):
    """put, delete, get, search and list_namespaces over their ``a``-twins."""

    @abstractmethod
    async def aput(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        *,
        index: Any = None,
        ttl: float | NotGiven | None = NOT_GIVEN,
    ) -> None: ...

    @abstractmethod
    async def adelete(self, namespace: Sequence[str], key: str) -> None: ...

    @abstractmethod
    async def aget(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None: ...

    @abstractmethod
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
    ) -> list[SearchItem]: ...

    @abstractmethod
    async def alist_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]: ...

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any] | None,
        *,
        index: Any = None,
        ttl: float | NotGiven | None = NOT_GIVEN,
    ) -> None:
        """Sync :meth:`aput`."""
        run_sync(self.aput(namespace, key, value, index=index, ttl=ttl))

    def delete(self, namespace: Sequence[str], key: str) -> None:
        """Sync :meth:`adelete`."""
        run_sync(self.adelete(namespace, key))

    def get(self, namespace: Sequence[str], key: str, *, refresh_ttl: bool | None = None) -> Item | None:
        """Sync :meth:`aget`."""
        return run_sync(self.aget(namespace, key, refresh_ttl=refresh_ttl))

    def search(
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
        """Sync :meth:`asearch`."""
        return run_sync(
            self.asearch(
                namespace_prefix, query=query, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh_ttl
            )
        )

    def list_namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """Sync :meth:`alist_namespaces`."""
        return run_sync(
            self.alist_namespaces(prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset)
        )
