"""How a worker stops a run, and how a run's job goes back to the queue.

A run is stopped at its next super-step boundary by its checkpointer (:class:`StoppingStore`)
or at once by its handle's event (:class:`Handle`); a job that must run again later raises
:class:`Requeue`, which :class:`RequeueStrategy` turns into a Procrastinate retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from procrastinate import exceptions
from procrastinate.retry import BaseRetryStrategy, RetryDecision

from plait.checkpoint.model import CheckpointWrite, Fence, WritesBatch
from plait.checkpoint.postgres import PostgresCheckpointer

__all__ = ["AtBoundary", "Handle", "Requeue", "RequeueStrategy", "StoppingStore"]


@dataclass(slots=True)
class Handle:
    """A run this worker is running: how to stop it."""

    run_id: str
    stop: str | None = None
    """Why it must stop at the next boundary: ``interrupt``, ``rollback`` or ``shutdown``."""
    now: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to stop at once; :attr:`stop_now` says why (``cancel``, ``shutdown``)."""
    stop_now: str | None = None


class Requeue(Exception):
    """Raised out of a job to have Procrastinate queue it again (in ``delay`` seconds)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay


class AtBoundary(BaseException):
    """Raised by the worker's checkpointer right after it committed a run's checkpoint, when
    the run was asked to stop: the engine stops there, before the next super-step starts, and
    gives the lease back. A ``BaseException`` (like ``asyncio.CancelledError``), so that no
    ``except Exception`` on the way can take it for a failure of the run."""


class StoppingStore(PostgresCheckpointer):
    """A PostgresCheckpointer that stops a run at its next committed checkpoint when asked.

    Why here and not by watching ``astream`` events: an event reaches the worker only when
    the engine next yields to the event loop, by which time the next super-step's nodes have
    started; raising from the commit itself stops the run exactly at the boundary, with the
    checkpoint stored and nothing of the next step begun. Runs are told apart by their lease
    owner, which every commit of a run carries in its fence.
    """

    stops: dict[str, Handle]

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
    ) -> None:
        await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence)
        if fence is None or not checkpoints or fence.release:
            return
        handle = self.stops.get(fence.owner)
        if handle is not None and handle.stop is not None:
            raise AtBoundary()


class RequeueStrategy(BaseRetryStrategy):
    """Retry a job that raised :class:`Requeue` (and only that), as often as it asks."""

    def get_retry_exception(self, exception: BaseException, job: Any) -> Any:
        if isinstance(exception, Requeue):
            return exceptions.JobRetry(RetryDecision(retry_in={"milliseconds": int(exception.delay * 1000)}))
        if isinstance(exception, asyncio.CancelledError):  # aborted at shutdown: the run goes on elsewhere
            return exceptions.JobRetry(RetryDecision())
        if _database_failure(exception):  # the run's own statements failed: try again once it is back
            return exceptions.JobRetry(RetryDecision(retry_in={"seconds": 1}))
        return None


def _database_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the database went away (not that a statement was wrong)."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | exceptions.ConnectorException)
