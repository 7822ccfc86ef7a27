"""A checkpointer's node cache: the two hooks every backend shares (kept apart from
:mod:`plait.checkpoint.base`, whose class holds the store's contract).

A backend that keeps a node cache in its own database overrides :meth:`CacheHooks.open_cache`;
:attr:`CacheHooks.cache` wraps what it returns (:class:`plait.checkpoint.cache.Cache`). The
cache package is imported only when a cache is asked for, so a checkpointer costs nothing more
to open for code that caches nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.errors import CacheUnsupportedError

if TYPE_CHECKING:
    from plait.checkpoint.cache import Cache, NodeCache

__all__ = ["CacheHooks"]


class CacheHooks:
    """The node-cache part of :class:`~plait.checkpoint.base.Checkpointer`."""

    __slots__ = ()

    @property
    def cache(self) -> Cache:
        """The node cache in this checkpointer's store (``plait.Cache(cp)``):
        ``graph.compile(cp, cache=cp.cache)``, or ``cache=True``.

        Raises:
            CacheUnsupportedError: this backend keeps no node cache.
        """
        from plait.checkpoint.cache import Cache

        return Cache(self)  # type: ignore[arg-type]  # (a Checkpointer: the only class that mixes this in)

    def open_cache(self) -> NodeCache:
        """Make the node cache this backend keeps (called once; :attr:`cache` wraps it). A
        backend that keeps one overrides it.

        Raises:
            CacheUnsupportedError: this backend keeps no node cache.
        """
        kind = getattr(getattr(self, "capabilities", None), "kind", "") or "an unknown kind"
        raise CacheUnsupportedError(f"{type(self).__name__} ({kind})")
