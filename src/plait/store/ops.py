"""The operation records of :meth:`Store.batch <plait.store.Store.batch>`, in the shape
LangGraph's ``BaseStore.batch`` takes (the same names and fields), so code written against
LangGraph's store runs unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

__all__ = ["NOT_GIVEN", "GetOp", "ListNamespacesOp", "MatchCondition", "NotGiven", "Op", "PutOp", "SearchOp"]


class NotGiven:
    """The type of :data:`NOT_GIVEN`."""

    _instance: NotGiven | None = None

    def __new__(cls) -> NotGiven:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> Literal[False]:
        return False

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final = NotGiven()
"""``put(..., ttl=NOT_GIVEN)``: the store's default time to live (``None`` means never)."""


class GetOp(NamedTuple):
    """Read one item (None when missing or expired)."""

    namespace: tuple[str, ...]
    key: str
    refresh_ttl: bool | None = None
    """Extend the item's life on this read (None: the store's ``refresh_on_read``)."""


class SearchOp(NamedTuple):
    """Find items under a namespace prefix (see :meth:`Store.search <plait.store.Store.search>`)."""

    namespace_prefix: tuple[str, ...]
    filter: Mapping[str, Any] | None = None
    limit: int = 10
    offset: int = 0
    query: str | None = None
    refresh_ttl: bool | None = None


class PutOp(NamedTuple):
    """Write one item; ``value=None`` deletes it."""

    namespace: tuple[str, ...]
    key: str
    value: Mapping[str, Any] | None
    index: Literal[False] | list[str] | None = None  # type: ignore[assignment]  # (LangGraph names the field so; tuple.index is shadowed)
    """None: the store's index fields; False: no vector; a list: these fields."""
    ttl: float | NotGiven | None = NOT_GIVEN
    """Minutes it lives (None: forever; NOT_GIVEN: the store's default)."""


class MatchCondition(NamedTuple):
    """A namespace test of :class:`ListNamespacesOp`: starts (``"prefix"``) or ends
    (``"suffix"``) with ``path``, where a ``"*"`` label matches any label."""

    match_type: Literal["prefix", "suffix"]
    path: tuple[str, ...]


class ListNamespacesOp(NamedTuple):
    """List the namespaces that hold items (see :meth:`Store.list_namespaces <plait.store.Store.list_namespaces>`)."""

    match_conditions: tuple[MatchCondition, ...] | None = None
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


Op = GetOp | SearchOp | PutOp | ListNamespacesOp
