"""What executes the API's runs, seen from the routes: the server's own runner (SQLite, file,
memory; :mod:`plait.serve.runner`) or the run queue's workers (PostgreSQL;
:mod:`plait.serve.queue_runner`). The routes know only this protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from plait.serve.records import RunRecord

__all__ = ["RunExecutor"]


class RunExecutor(Protocol):
    async def start(self) -> None:
        """Begin executing (and pick up what a previous server left)."""

    async def close(self) -> None:
        """Stop executing; what was cut off goes on at the next start, or on another worker."""

    async def create(self, record: RunRecord, *, thread_tags: Mapping[str, Any] | None = None) -> RunRecord:
        """Store ``record`` under its multitask strategy and queue it, ``thread_tags`` merged
        into its thread's metadata (the graph's ids, on a thread's first run of it).

        Raises:
            RunRejectedError: ``multitask="reject"`` and the thread has an active run.
        """

    async def cancel(self, run_id: str, action: str) -> RunRecord:
        """Stop the run (``interrupt``: at its next super-step boundary; ``rollback``: there,
        dropping what it wrote and the run itself).

        Raises:
            RunNotFoundError: no such run.
        """

    async def join(self, run_id: str) -> RunRecord:
        """The run once it has ended.

        Raises:
            RunNotFoundError: no such run (or it was rolled back).
        """

    async def is_active(self, run_id: str) -> bool: ...
