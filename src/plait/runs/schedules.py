"""Firing cron schedules exactly once per tick, whatever the number of workers.

Every worker registers one Procrastinate periodic task that ticks every second; Procrastinate
defers it once per second across all workers (its ``defer_periodic_job`` is unique per task,
periodic id and timestamp), and one worker runs each such job. That job, in one transaction,
locks the schedules (``FOR UPDATE SKIP LOCKED``: a slow job and the next one never fire one
schedule together), submits a run for each tick in ``(last_tick, now]`` and moves
``last_tick``. The run rows are unique per ``(schedule_id, tick)``, so a fire job that a crash
made run twice submits nothing the second time: each tick gets exactly one run. A tick's run
is submitted as :meth:`Runs.asubmit` submits one (:func:`plait.runs._submit.submit`), in a
savepoint of that transaction.

A schedule's table holds the run's graph, input, thread, multitask and metadata; a run that
needs more (``plait serve``'s crons: the stream stored as the LangGraph API's events, a
context, breakpoints) has it in the schedule's metadata under :data:`SUBMIT_KEY`.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from plait.errors import RunRejectedError
from plait.runs import _store
from plait.runs._db import Database
from plait.runs._submit import Submission, run_options, submit, wire_modes
from plait.runs.cron import check_cron
from plait.runs.cron import ticks as cron_ticks

__all__ = ["CATCH_UP", "SUBMIT_KEY", "Opened", "check_cron", "fire_due", "ticks"]

CATCH_UP = 100
"""The most ticks of one schedule fired at once, after a time no worker ran."""

SUBMIT_KEY = "submit"
"""A schedule whose metadata is an object holding this key submits its runs with what that
holds: ``metadata`` (the runs' metadata, in place of the schedule's), ``context``, and
``options``, :meth:`Runs.asubmit`'s keywords (``wire``, ``interrupt_before``, ``durability``,
``recursion_limit``, ...)."""


def ticks(cron: str, after: int, until: int, limit: int = CATCH_UP) -> list[int]:
    """The ticks of ``cron`` in ``(after, until]`` (unix seconds), the last ``limit`` of them."""
    return cron_ticks(cron, after, until, limit)


def _extras(metadata: Any) -> dict[str, Any]:
    """The keywords of a tick's :class:`Submission` that the schedule's metadata carries
    (:data:`SUBMIT_KEY`); none when it carries none, or none that :meth:`Runs.asubmit` takes."""
    extra = metadata.get(SUBMIT_KEY) if isinstance(metadata, dict) else None
    if not isinstance(extra, dict):
        return {"metadata": metadata}
    try:
        options = run_options(**dict(extra.get("options") or {}))
        modes = wire_modes(options["wire"]) if options and "wire" in options else ()
    except (TypeError, ValueError):
        options, modes = None, ()
    return {"metadata": extra.get("metadata"), "context": extra.get("context"), "options": options, "modes": modes}


class Opened(Protocol):
    """What :func:`fire_due` needs of a :class:`~plait.runs.Runs`: its database, open."""

    @property
    def db(self) -> Database: ...


async def fire_due(runs: Opened, now: int) -> int:
    """Submit the due ticks of every schedule (see the module docstring); the number submitted."""
    from procrastinate.manager import JobManager

    jobs = JobManager(runs.db.connector)
    fired = 0
    async with runs.db.connection() as conn, conn.transaction(), conn.cursor() as cur:
        await cur.execute(
            f"SELECT {_store.SCHEDULE_COLUMNS} FROM plait_schedule ORDER BY schedule_id FOR UPDATE SKIP LOCKED"
        )
        rows: list[Any] = await cur.fetchall()
        for row in rows:
            schedule = _store.row_schedule(row)
            due = ticks(schedule.cron, schedule.last_tick or 0, now)
            for tick in due:
                try:
                    async with conn.transaction():  # a savepoint: a refused tick leaves the others
                        run_id = await submit(
                            conn,
                            jobs,
                            Submission(
                                run_id=uuid.uuid4().hex,
                                graph=schedule.graph,
                                input=schedule.input,
                                thread_id=schedule.thread_id or f"{schedule.schedule_id}:{tick}",
                                namespace=schedule.namespace,
                                multitask=schedule.multitask,
                                queue=row[10],
                                schedule=(schedule.schedule_id, tick),
                                **_extras(schedule.metadata),
                            ),
                        )
                except RunRejectedError:
                    continue  # multitask="reject" and the previous tick's run still runs: this tick is skipped
                fired += bool(run_id)
            if due:
                await cur.execute(
                    "UPDATE plait_schedule SET last_tick = %s WHERE schedule_id = %s", (due[-1], schedule.schedule_id)
                )
    return fired
