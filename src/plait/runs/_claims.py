"""Procrastinate's fetch of a job and plait's claim of the job's run, in one statement.

Why: a run began with two statements one right after the other, each a round trip and a
commit: Procrastinate's fetch (``procrastinate_fetch_job_v2``, which marks a job ``doing``)
and plait's claim (:func:`plait.runs._store.claim`: the run marked running and read). The
worker's job manager fetches with :data:`FETCH_AND_CLAIM` instead: the same function call,
with the claim of the fetched job's run in the same statement, so that both commit together.
The claim is the one :func:`~plait.runs._store.claim` makes (the same conditions: a run on
the job's thread, active, asked to stop by no one, rolling nothing back, of a graph with no
limit that this worker runs); a run it does not claim is left as it was, for the worker's
long way. The claimed run waits here for the job's task (:meth:`Claims.take`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from plait.runs import _store
from plait.runs.client import ADVANCE_TASK
from plait.runs.records import Run

__all__ = ["FETCH_AND_CLAIM", "Claims"]

_COLUMNS = [c.strip() for c in _store.RUN_COLUMNS.split(",")]

FETCH_AND_CLAIM = (
    "WITH j AS MATERIALIZED (SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at, "
    "queue_name, attempts, worker_id FROM procrastinate_fetch_job_v2(%(queues)s::varchar[], %(worker_id)s)), "
    f"c AS ({_store.CLAIM_FROM_JOB} RETURNING "
    + ", ".join(f"r.{c} AS r_{c}" for c in _COLUMNS)
    + f", {_store.CLAIM_EVENTS} AS r_events) "
    "SELECT j.*, c.* FROM j LEFT JOIN c ON true"
)
"""Procrastinate's ``fetch_job`` query (the same columns of the same function), with the
claim of the fetched job's run; the run's columns come back prefixed ``r_`` (NULL: none)."""


class Claims:
    """The runs claimed with their job's fetch, until the job's task takes them."""

    def __init__(self) -> None:
        self._claimed: dict[int, tuple[Run, dict[str, Any]]] = {}

    def installed(self, app: Any, worker: str, graphs: Callable[[], Awaitable[list[str]]]) -> Any:
        """``app`` (a Procrastinate ``App``) whose job manager fetches with
        :data:`FETCH_AND_CLAIM`, claiming as ``<worker>/job-<id>`` a run of one of
        ``graphs()`` (none: no claim)."""
        from procrastinate import jobs

        manager = app.job_manager

        async def fetch_job(queues: Any, worker_id: int) -> Any:
            now = time.time()
            row = await manager.connector.execute_query_one_async(
                query=FETCH_AND_CLAIM,
                queues=queues,
                worker_id=worker_id,
                worker=worker,
                now=now,
                task=ADVANCE_TASK,
                graphs=await graphs(),
            )
            if row["id"] is None:
                return None
            if row["r_run_id"] is not None:
                found = [row[f"r_{c}"] for c in _COLUMNS]
                self._claimed[row["id"]] = _store.claimed_row([*found, row["r_events"]])
            return jobs.Job.from_row(row)

        manager.fetch_job = fetch_job
        return app

    def take(self, job: int) -> tuple[Run, dict[str, Any]] | None:
        """The run claimed with ``job``'s fetch, marked running for an attempt as
        ``<worker>/job-<job>`` (None: none was)."""
        return self._claimed.pop(job, None)
