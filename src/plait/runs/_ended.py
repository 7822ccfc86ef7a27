"""The queue jobs a worker deleted itself, in the statement that recorded its run's end.

Why: a run's end and Procrastinate's finish of its job were two statements, one right after
the other, each a round trip and a commit with its WAL flush. The worker deletes the job in
the statement of the run's end instead (:func:`plait.runs._store.finish_job`: the same
``DELETE`` Procrastinate's ``procrastinate_finish_job_v1`` runs for a job that succeeded
when jobs that succeeded are deleted, as the worker asks), so that the end and the job's
removal commit together; a worker killed between them no longer leaves a job to run again
only to find its run ended.

Procrastinate must then not finish (or retry) that job itself: its function raises for a job
that is gone. :class:`EndedJobs` takes the job manager's two calls and answers those for a
job deleted here without a statement; every other job goes to Procrastinate as before.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EndedJobs"]


class EndedJobs:
    """The jobs deleted with their run's end, not yet acknowledged by Procrastinate."""

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def add(self, job: int) -> None:
        """``job`` was deleted with its run's end: Procrastinate's finish of it is to be skipped."""
        self._ids.add(job)

    def installed(self, app: Any) -> Any:
        """``app`` (a Procrastinate ``App``) with its job manager's ``finish_job`` and
        ``retry_job`` routed through this set: a job deleted here is done, with no statement
        (a job cancelled after its end, at a shutdown past its timeout, is not retried: its
        run is recorded as ended)."""
        manager = app.job_manager
        finish, retry = manager.finish_job, manager.retry_job

        async def finish_job(job: Any, *args: Any, **kwargs: Any) -> None:
            if job.id in self._ids:
                self._ids.discard(job.id)
                return
            await finish(job, *args, **kwargs)

        async def retry_job(job: Any, *args: Any, **kwargs: Any) -> None:
            if job.id in self._ids:
                self._ids.discard(job.id)
                return
            await retry(job, *args, **kwargs)

        manager.finish_job = finish_job
        manager.retry_job = retry_job
        return app
