"""The server's run log: threads' metadata, runs, and every event each run streamed.

One abstract class, so that the server's routes and its runner never know where the log
lives; :mod:`plait.serve.sqlite_log` keeps it in the SQLite file the checkpoints are in (or
beside a file store, or in memory for the memory store). Events are stored before they are
sent: a client that comes back with ``Last-Event-ID`` reads them from here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from plait.serve.records import RunRecord, StoredEvent, ThreadRecord

__all__ = ["LocalRunLog", "RunLog", "thread_order", "with_metadata"]


class RunLog(ABC):
    """Where the API server keeps what the checkpointer does not: every method is atomic.
    What the routes read and edit; who writes runs and their events is the runner's part
    (:class:`LocalRunLog` for the server's own runner; workers on PostgreSQL)."""

    @abstractmethod
    async def open(self) -> None:
        """Create the tables if they are missing (idempotent)."""

    @abstractmethod
    async def close(self) -> None: ...

    # -- threads ---------------------------------------------------------------------------

    @abstractmethod
    async def put_thread(self, record: ThreadRecord) -> tuple[ThreadRecord, bool]:
        """Store ``record`` unless the thread exists; returns the stored record and whether
        it was created now."""

    @abstractmethod
    async def get_thread(self, thread_id: str) -> ThreadRecord | None: ...

    @abstractmethod
    async def update_thread(self, thread_id: str, metadata: Mapping[str, Any], now: float) -> ThreadRecord | None:
        """Merge ``metadata`` into the thread's (top-level keys) and touch it; None when
        there is no such thread."""

    @abstractmethod
    async def touch_thread(self, thread_id: str, now: float) -> None: ...

    @abstractmethod
    async def delete_thread(self, thread_id: str) -> bool:
        """Forget the thread, its runs and their events; whether it existed."""

    @abstractmethod
    async def search_threads(
        self, *, metadata: Mapping[str, Any] | None, ids: Sequence[str] | None, sort_by: str, descending: bool
    ) -> list[ThreadRecord]:
        """Threads whose metadata contains ``metadata`` (top-level keys equal), of ``ids``
        when given, in order."""

    # -- runs ------------------------------------------------------------------------------

    @abstractmethod
    async def get_run(self, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    async def active_runs(self, thread_id: str) -> list[RunRecord]:
        """The thread's pending and running runs, oldest first: what every request that asks
        whether a thread is busy reads, so it must not cost more as the thread's past grows."""

    @abstractmethod
    async def runs_of(self, thread_id: str, *, status: str | None = None) -> list[RunRecord]:
        """The thread's runs, oldest first."""

    @abstractmethod
    async def delete_run(self, run_id: str) -> None: ...

    # -- events ----------------------------------------------------------------------------

    @abstractmethod
    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """The run's events with a sequence number above ``after``, in order."""

    @abstractmethod
    async def drop_events(self, ended_before: float) -> int:
        """Forget the events of runs that ended before ``ended_before``; how many went."""


class LocalRunLog(RunLog):
    """The run log of a server that runs its runs itself: it stores them and their events."""

    @abstractmethod
    async def insert_run(
        self, record: RunRecord, *, tags: Mapping[str, Any] | None = None, reject: bool = False
    ) -> list[RunRecord]:
        """Store ``record`` in one transaction with what a new run needs besides: ``tags``
        merged into its thread's metadata (top-level keys; the thread must exist), and the
        thread's active runs read. Returns those runs (as :meth:`active_runs` would have
        before the insert); with ``reject`` and some active, nothing is written."""

    @abstractmethod
    async def unfinished_runs(self) -> list[RunRecord]:
        """Every pending or running run, oldest first (a restarted server runs them)."""

    @abstractmethod
    async def save_run(self, record: RunRecord, events: Sequence[tuple[str, bytes]] = ()) -> int:
        """Write every field of an existing run, and append ``events`` after its last one,
        in one transaction; one that ended touches its thread (its ``updated_at``) there
        too. Returns the sequence number of the last event appended (0: none given): a run's
        start and its first event, its last events and its end, each one commit."""

    @abstractmethod
    async def append_events(self, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int:
        """Store ``events`` (name, JSON document) after the run's last one, in one
        transaction; returns the sequence number of the last."""

    def append_events_now(self, run_id: str, events: Sequence[tuple[str, bytes]], now: float) -> int | Awaitable[int]:
        """:meth:`append_events` for a streamed answer's chunks, as soon as the log can: the
        last event's number when they are stored before this returns (SQLite's log does so
        when its file is free), else what to await for it. A chunk handed to a thread waits
        behind the step commit its node has just queued, and that commit's fsync."""
        return self.append_events(run_id, events, now)

    @abstractmethod
    async def last_event(self, run_id: str) -> int:
        """The sequence number of the run's last event (0: none)."""


_SORTS = {"thread_id": "thread_id", "created_at": "created_at", "updated_at": "updated_at"}


def thread_order(sort_by: str, descending: bool) -> str:
    """The ORDER BY of a thread search (an unknown key sorts by ``updated_at``), in SQL that
    both stores read: only column names of ours reach the statement."""
    direction = "DESC" if descending else "ASC"
    return f" ORDER BY {_SORTS.get(sort_by, 'updated_at')} {direction}, thread_id {direction}"


def with_metadata(records: list[ThreadRecord], metadata: Mapping[str, Any] | None) -> list[ThreadRecord]:
    """The records whose metadata holds every key of ``metadata`` with its value."""
    if not metadata:
        return records
    return [r for r in records if all(k in r.metadata and r.metadata[k] == v for k, v in metadata.items())]
