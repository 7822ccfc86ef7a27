"""Statements of a caller's that ride on a run's lease: sent inside the statement that takes
the lease and reads the checkpoint the run starts from, so that they commit with it.

Why: a ``plait worker`` records the checkpoint a run's first attempt starts from (the head it
found under the lease) before the run writes its input, so that a later attempt can tell
whether the input landed. That was a statement of its own, a round trip and a commit between
the lease and the first commit of every run; riding on the lease's statement, it commits
with the lease (before the input, as before) at no round trip of its own.

A rider waits under its run's ``(namespace, thread_id, owner)`` until a lease taken by that
owner on that thread carries it; the caller then asks :meth:`LeaseRiders.took` whether it
did, and does the work itself when it did not (a checkpointer path that took the lease
without it, or a rider dropped): a rider is a saving, never something a caller may count
on. So the riders kept are bounded (:data:`KEPT`), the oldest dropped first: one whose run
never took its lease (it failed before) would otherwise stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["LeaseRiders", "Rider"]

Rider = tuple[str, Sequence[Any]]
"""A data-modifying statement (psycopg's ``%s`` parameters) and its parameters; it may read
the id of the checkpoint the lease read (None: no checkpoint) as ``(SELECT id FROM l LIMIT 1)``."""

_Key = tuple[str, str, str]

KEPT = 10_000
"""Riders kept at most, waiting and carried each."""


class LeaseRiders:
    """The riders waiting for their lease, and those carried but not yet asked about."""

    def __init__(self) -> None:
        self._waiting: dict[_Key, Rider] = {}
        self._carried: dict[_Key, None] = {}

    def add(self, thread_id: str, namespace: str, owner: str, rider: Rider) -> None:
        """Send ``rider`` with the next lease ``owner`` takes on the thread."""
        _bounded(self._waiting)[(namespace, thread_id, owner)] = rider

    def waiting(self, key: _Key) -> Rider | None:
        return self._waiting.get(key)

    def carried(self, key: _Key) -> None:
        """A lease taken by ``key``'s owner committed with its rider."""
        self._waiting.pop(key, None)
        _bounded(self._carried)[key] = None

    def took(self, thread_id: str, namespace: str, owner: str) -> bool:
        """Whether a lease carried the rider added for ``owner`` on the thread (once; a rider
        still waiting is dropped)."""
        key = (namespace, thread_id, owner)
        self._waiting.pop(key, None)
        if key not in self._carried:
            return False
        del self._carried[key]
        return True


def _bounded(kept: dict[_Key, Any]) -> dict[_Key, Any]:
    """``kept``, its oldest entry dropped when it holds :data:`KEPT`."""
    if len(kept) >= KEPT:
        del kept[next(iter(kept))]
    return kept
