"""Runs and workers: many processes and machines running graphs on one PostgreSQL.

``import plait.runs`` (explicitly: ``import plait`` never pulls in the job queue) gives the run
model (:class:`Runs`: submit, get, list, cancel, wait, stream, schedules, limits), the
:class:`Worker` that ``plait worker`` runs, and their records. The queue under it is
Procrastinate (the ``runs`` extra: ``pip install 'plait[runs]'``); see docs/workers.md.
"""

from plait.errors import (
    NoRunQueueError,
    QueueSchemaError,
    RunNotFoundError,
    RunRejectedError,
    RunsError,
    RunWaitTimeoutError,
    ScheduleNotFoundError,
    UnknownGraphError,
)
from plait.runs.client import Runs
from plait.runs.cron import CronFieldsWarning, next_fires
from plait.runs.records import MULTITASK, RUN_STATUSES, Multitask, Run, RunStatus, Schedule
from plait.runs.worker import Worker, WorkerSettings

__all__ = [
    "MULTITASK",
    "CronFieldsWarning",
    "RUN_STATUSES",
    "Multitask",
    "NoRunQueueError",
    "QueueSchemaError",
    "Run",
    "RunNotFoundError",
    "RunRejectedError",
    "RunStatus",
    "RunWaitTimeoutError",
    "Runs",
    "RunsError",
    "Schedule",
    "ScheduleNotFoundError",
    "UnknownGraphError",
    "Worker",
    "WorkerSettings",
    "next_fires",
]
