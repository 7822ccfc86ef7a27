"""What the node cache (``CachePolicy``, ``MemoryCache``, ``Cache``) refuses (see :mod:`plait.errors`)."""

from __future__ import annotations

from plait.errors._base import PlaitError

__all__ = ["CacheError", "CacheKeyError", "CacheUnsupportedError", "CacheValueError", "NoCacheError"]


class CacheError(PlaitError):
    """The node cache refused a call or a value."""


class CacheKeyError(CacheError, TypeError):
    """A cache key plait cannot make: the node's input is not JSON data (the default key is
    its canonical JSON), or ``key_func`` raised or returned something other than str or bytes."""

    def __init__(self, who: str, why: str) -> None:
        self.who = who
        super().__init__(
            f"the cache key of {who} cannot be made: {why}. Give the node's CachePolicy a "
            "key_func(input) -> str | bytes that names what the result depends on."
        )


class CacheValueError(CacheError, TypeError):
    """A result the cache would have to hold that is not JSON data. A cache entry is JSON
    text and nothing else (never pickled: a cache that unpickles what it reads runs the code
    whoever wrote the entry put there)."""

    def __init__(self, who: str, why: str) -> None:
        self.who = who
        super().__init__(
            f"the result of {who} cannot be cached: {why}. A cached result is JSON data only "
            "(str, int, float, bool, None, lists and dicts of them); return JSON data, or drop "
            "its cache_policy."
        )


class NoCacheError(CacheError):
    """``clear_cache()`` on a graph compiled without a cache."""

    def __init__(self, graph: str) -> None:
        self.graph = graph
        super().__init__(
            f"graph {graph!r} was compiled without a cache, so it has none to clear: "
            "compile(cache=plait.MemoryCache()) or compile(checkpointer, cache=True)."
        )


class CacheUnsupportedError(CacheError):
    """``plait.Cache(checkpointer)`` (or ``checkpointer.cache``) on a backend that keeps no cache."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        super().__init__(
            f"{backend} keeps no node cache: use plait.MemoryCache(), or a SQLite, PostgreSQL, "
            "file or memory checkpointer's cache (plait.Cache(checkpointer))."
        )
