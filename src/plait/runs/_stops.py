"""How a worker stops a run, and how a run's job goes back to the queue.

A run is stopped at its next super-step boundary by its hooks (:class:`Steering`) or at once
by its handle's event (:class:`Handle`); a job that must run again later raises
:class:`Requeue`, which :class:`RequeueStrategy` turns into a Procrastinate retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from procrastinate import exceptions
from procrastinate.retry import BaseRetryStrategy, RetryDecision

from plait.checkpoint.model import Checkpoint
from plait.engine.options import RunHooks, RunResult
from plait.runs._events import Events
from plait.tracing import carrier

__all__ = ["Handle", "Requeue", "RequeueStrategy", "Steering", "database_failure"]


@dataclass(slots=True)
class Handle:
    """A run this worker is running: how to stop it."""

    run_id: str
    stop: str | None = None
    """Why it must stop at the next boundary: ``interrupt``, ``rollback`` (for a newer run),
    ``discard`` (a cancel with rollback) or ``shutdown``."""
    now: asyncio.Event = field(default_factory=asyncio.Event)
    """Set to stop at once; :attr:`stop_now` says why (``cancel``, ``shutdown``)."""
    stop_now: str | None = None
    job: int | None = None
    """The run's queue job, deleted with the run's end (:class:`~plait.runs._ended.EndedJobs`)."""


class Requeue(Exception):
    """Raised out of a job to have Procrastinate queue it again (in ``delay`` seconds)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Steering(RunHooks):
    """How a worker steers one attempt of a run through the run's hooks: the stream items the
    run was submitted with go to its :class:`Events`, stored as a batch at each super-step
    boundary; a stop asked for (``interrupt``, ``rollback``, the first SIGTERM) ends the run
    there, with the checkpoint committed and nothing of the next step begun. The store is the
    worker's plain checkpointer: nothing of this needs a store of its own kind."""

    def __init__(
        self,
        handle: Handle,
        events: Events,
        record_start: Callable[[str | None], Awaitable[None]],
        record_span: Callable[[str], Awaitable[None]],
        started: bool,
        start: str | None,
        root: bool = False,
        previous_span: str | None = None,
        attempt: int = 1,
        took_start: Callable[[], bool] = lambda: False,
    ) -> None:
        self.root = root
        self.attempt = attempt
        found = carrier.parse_stamp(previous_span)
        self.trace_links = (found,) if found is not None else ()
        self.span: str | None = None
        """This attempt's ``plait.run`` span, when traced (``<trace id>-<span id>``)."""
        self.handle = handle
        self.events = events
        self.record_start = record_start
        self.record_span = record_span
        self.took_start = took_start
        """Whether the lease recorded where the run starts (:func:`~plait.runs._prepare.start_rider`)."""
        self.started = started
        """Whether an earlier attempt recorded where the run started (``start``)."""
        self.start = start
        self.modes = frozenset(events.modes)
        self.subgraphs = events.subgraphs
        self.result: RunResult | None = None
        """How the run ended (None: it failed, or has not ended)."""

    async def on_trace(self, stamp: Mapping[str, str]) -> None:
        """A traced attempt records its span before its first step, for the next attempt to
        link to (a worker killed mid-run never exports it)."""
        self.span = carrier.stamp_text(stamp)
        carrier.annotate({"plait.queued_run_id": self.handle.run_id, "plait.attempt": self.attempt})
        await self.record_span(self.span)

    async def on_start(self, head: Checkpoint | None, input: Any) -> Any:
        """Why a job never replays code: a first attempt records the head it found (before its
        input is written); a later one applies the input only if the head is still that one,
        and otherwise continues the thread (its input landed before the crash)."""
        found = head.id if head is not None else None
        if not self.started:
            if not self.took_start():  # else the lease's statement recorded it
                await self.record_start(found)
            return input
        return input if found == self.start else None

    def on_item(self, mode: str, item: Any) -> None:
        self.events.item(mode, item)

    def on_subgraph_item(self, namespace: tuple[str, ...], mode: str, item: Any) -> None:
        self.events.item(mode, item, namespace)

    async def at_step(self, checkpoint: Checkpoint) -> bool:
        await self.events.flush()
        return self.handle.stop is not None

    def on_finish(self, result: RunResult) -> None:
        self.result = result


class RequeueStrategy(BaseRetryStrategy):
    """Retry a job that raised :class:`Requeue` (and only that), as often as it asks."""

    def get_retry_exception(self, exception: BaseException, job: Any) -> Any:
        if isinstance(exception, Requeue):
            return exceptions.JobRetry(RetryDecision(retry_in={"milliseconds": int(exception.delay * 1000)}))
        if isinstance(exception, asyncio.CancelledError):  # aborted at shutdown: the run goes on elsewhere
            return exceptions.JobRetry(RetryDecision())
        if database_failure(exception):  # the run's own statements failed: try again once it is back
            return exceptions.JobRetry(RetryDecision(retry_in={"seconds": 1}))
        return None


def database_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the database went away (not that a statement was wrong)."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | exceptions.ConnectorException)
