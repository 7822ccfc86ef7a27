"""Long-term memory across threads: :class:`Store`, its records and its operations.

Below the checkpoint layer: a checkpointer that keeps memory implements
:class:`~plait.store.records.MemoryBackend` (so that a step's memory writes commit in the
step's own transaction); this package knows no checkpointer.
"""

from plait.store.ops import NOT_GIVEN, GetOp, ListNamespacesOp, MatchCondition, NotGiven, Op, PutOp, SearchOp
from plait.store.records import (
    Condition,
    Item,
    MemoryBackend,
    MemorySearch,
    MemoryWrite,
    NamespaceListing,
    SearchItem,
    StoredItem,
)
from plait.store.store import Store, TTLConfig
from plait.store.vectors import IndexConfig

__all__ = [
    "NOT_GIVEN",
    "Condition",
    "GetOp",
    "IndexConfig",
    "Item",
    "ListNamespacesOp",
    "MatchCondition",
    "MemoryBackend",
    "MemorySearch",
    "MemoryWrite",
    "NamespaceListing",
    "NotGiven",
    "Op",
    "PutOp",
    "SearchItem",
    "SearchOp",
    "StoredItem",
    "Store",
    "TTLConfig",
]
