"""Where a store's space goes: sizes per thread, per namespace, and the dead space it holds.

A backend answers :meth:`~plait.checkpoint.base.Checkpointer.aspace` with one
:class:`ThreadSpace` per stored ``(namespace, thread_id)`` (subgraph namespaces included, as
stored) and, where it can tell, its :class:`DeadSpace`. :func:`summarize` turns that into what
``plait db stats`` shows: a subgraph's namespaces belong to the thread whose task ran the
subgraph, so their checkpoints and bytes are counted with that parent thread, and a namespace's
``threads`` counts parent threads only.

A subgraph's namespace is ``<parent namespace>|<node>:<task id>`` (or ``<node>:<task id>`` under
the root namespace ``""``), where the task id is 16 hex digits (see
``plait.engine.subgraph.child_namespace``). A namespace of that shape is taken as a subgraph's
only when its parent namespace is stored for the same thread id, so a user namespace that
merely looks like one (``team:0123456789abcdef``) stays a namespace of its own unless the same
thread id also has checkpoints in the namespace it would hang from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["DeadSpace", "NamespaceSpace", "StoreSpace", "ThreadSpace", "subgraph_parent", "summarize"]

_CHILD = re.compile(r"(?:(.*)\|)?[^|]+:[0-9a-f]{16}", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadSpace:
    """One thread's share of a store (with its subgraphs' namespaces once summarized)."""

    namespace: str
    thread_id: str
    checkpoints: int
    bytes: int | None
    """What its checkpoints, channel values and pending writes take as stored (the encoded
    payload on SQLite and PostgreSQL, the file's size on the file store; indexes and page
    overhead excluded); None where the store cannot tell (memory)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceSpace:
    """One namespace's share of a store: its threads, with their subgraphs."""

    namespace: str
    threads: int
    """Parent threads: a subgraph's namespace is counted with the thread that ran it."""
    checkpoints: int
    bytes: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadSpace:
    """Space a store holds for data that is gone: what deleting and pruning left behind."""

    bytes: int | None
    """Bytes held for rows or pages no longer used (None: not known)."""
    rows: int | None = None
    """Dead rows waiting for a vacuum (PostgreSQL's ``n_dead_tup``); None elsewhere."""
    estimated: bool = False
    """Whether :attr:`bytes` is an estimate (PostgreSQL: dead rows times the average row's
    size in each table) rather than a count (SQLite: free pages times the page size)."""
    reclaim: str = ""
    """How the store gives it back, for an operator (one sentence)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSpace:
    """What :meth:`~plait.checkpoint.base.Checkpointer.aspace` answers."""

    threads: list[ThreadSpace] = field(default_factory=list)
    """One per stored ``(namespace, thread_id)``, subgraph namespaces as stored."""
    dead: DeadSpace | None = None
    """The space deleted and pruned data left behind, where the store can tell."""


def subgraph_parent(namespace: str) -> str | None:
    """The namespace a subgraph's namespace hangs from, or None when ``namespace`` does not have
    a subgraph namespace's shape (see the module's docstring)."""
    match = _CHILD.fullmatch(namespace)
    if match is None:
        return None
    return match.group(1) or ""


def _owner(namespace: str, thread_id: str, stored: set[tuple[str, str]]) -> str:
    """The namespace of the parent thread that ``(namespace, thread_id)`` belongs to."""
    while (parent := subgraph_parent(namespace)) is not None and (parent, thread_id) in stored:
        namespace = parent
    return namespace


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def summarize(threads: Iterable[ThreadSpace], *, top: int = 10) -> tuple[list[NamespaceSpace], list[ThreadSpace]]:
    """The namespaces (sorted by name) and the ``top`` largest threads (by bytes, then
    checkpoints, largest first), each subgraph namespace folded into its parent thread."""
    rows = list(threads)
    stored = {(t.namespace, t.thread_id) for t in rows}
    parents: dict[tuple[str, str], ThreadSpace] = {}
    for t in rows:
        key = (_owner(t.namespace, t.thread_id, stored), t.thread_id)
        was = parents.get(key)
        parents[key] = ThreadSpace(
            namespace=key[0],
            thread_id=t.thread_id,
            checkpoints=t.checkpoints + (was.checkpoints if was else 0),
            bytes=_add(t.bytes, was.bytes if was else 0),
        )
    spaces: dict[str, NamespaceSpace] = {}
    for t in parents.values():
        was_ns = spaces.get(t.namespace)
        spaces[t.namespace] = NamespaceSpace(
            namespace=t.namespace,
            threads=1 + (was_ns.threads if was_ns else 0),
            checkpoints=t.checkpoints + (was_ns.checkpoints if was_ns else 0),
            bytes=_add(t.bytes, was_ns.bytes if was_ns else 0),
        )
    largest = sorted(parents.values(), key=lambda t: (-(t.bytes or 0), -t.checkpoints, t.namespace, t.thread_id))[
        : max(top, 0)
    ]
    return [spaces[ns] for ns in sorted(spaces)], largest
