"""Crons of the API on PostgreSQL: :mod:`plait.runs`' schedules, fired by the run queue's
workers (in the server's process and any ``plait worker`` on the database), exactly once
per tick (:mod:`plait.runs.schedules`).

A schedule's table keeps the graph, the cron, the input, the thread and the multitask
strategy; the rest is in the schedule's metadata: the API's cron (``"cron"``: its assistant,
payload, metadata, times) and what each run is submitted with beyond those
(:data:`~plait.runs.schedules.SUBMIT_KEY`: its metadata, context, stream modes as the API's
events, breakpoints, durability, recursion limit), so a fired run is the one the cron's
payload asks for. Schedules have no end time and cannot be paused: a cron with
``end_time`` or ``enabled=false`` is refused here, with why.
"""

from __future__ import annotations

from typing import Any

from plait.errors import ScheduleNotFoundError, ServeRequestError
from plait.runs import Runs, Schedule
from plait.runs import _store as store
from plait.runs.schedules import SUBMIT_KEY, fire_due
from plait.serve.crons import CronRecord, Crons, run_body
from plait.serve.requests import run_kwargs

__all__ = ["PgCrons"]

_DOC = ("assistant_id", "payload", "metadata", "on_run_completed", "end_time", "enabled", "timezone", "created_at",
        "updated_at")  # fmt: skip
"""The fields of a cron kept under ``"cron"`` in its schedule's metadata."""


def _cron_of(schedule: Schedule) -> CronRecord | None:
    """The API's cron of a schedule (None: a schedule made otherwise, by ``plait schedule``)."""
    doc = schedule.metadata.get("cron") if isinstance(schedule.metadata, dict) else None
    if not isinstance(doc, dict):
        return None
    return CronRecord(
        cron_id=schedule.schedule_id, graph=schedule.graph, thread_id=schedule.thread_id, schedule=schedule.cron,
        last_tick=float(schedule.last_tick or 0), **{k: doc[k] for k in _DOC if k in doc},
    )  # fmt: skip


def _schedule_of(cron: CronRecord) -> tuple[Any, str, dict[str, Any]]:
    """A schedule's input, multitask strategy and metadata for ``cron``."""
    body = run_body(cron, None)
    kw = run_kwargs(body)
    given = kw["input"]
    if given is None and cron.thread_id is None:
        given = {}  # a new thread with no input: the graph starts on its defaults
    options = {
        "wire": {"modes": kw["stream_mode"], "subgraphs": kw["subgraphs"]},
        **{k: kw[k] for k in ("interrupt_before", "interrupt_after", "durability", "recursion_limit")},
    }
    carried = {"metadata": body["metadata"], "context": kw["context"], "options": options}
    doc = {k: getattr(cron, k) for k in _DOC}
    return given, str(body.get("multitask_strategy") or "enqueue"), {"cron": doc, SUBMIT_KEY: carried}


class PgCrons(Crons):
    """The API's crons as schedules of ``runs``."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    def refuse(self, cron: CronRecord) -> None:
        if not cron.enabled:
            raise ServeRequestError(
                "enabled", "a cron cannot be paused on PostgreSQL yet (the run queue's schedules cannot): delete it"
            )
        if cron.end_time is not None:
            raise ServeRequestError(
                "end_time", "is not kept on PostgreSQL yet (the run queue's schedules have none): delete the cron then"
            )

    async def close(self) -> None:
        """Nothing to stop: the run queue's workers fire the schedules."""

    async def add(self, cron: CronRecord) -> None:
        given, multitask, metadata = _schedule_of(cron)
        await self.runs.aschedule(
            cron.graph, cron.schedule, given, thread_id=cron.thread_id, multitask=multitask,  # type: ignore[arg-type]
            metadata=metadata, schedule_id=cron.cron_id,
        )  # fmt: skip

    async def all(self) -> list[CronRecord]:
        return [c for s in await self.runs.aschedules() if (c := _cron_of(s)) is not None]

    async def save(self, cron: CronRecord) -> bool:
        given, multitask, metadata = _schedule_of(cron)
        async with self.runs.db.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                "UPDATE plait_schedule SET cron = %s, input = %s, multitask = %s, metadata = %s, "
                "last_tick = greatest(last_tick, %s) WHERE schedule_id = %s",
                (
                    cron.schedule, store.encode(given), multitask, store.encode(metadata), int(cron.last_tick),
                    cron.cron_id,
                ),
            )  # fmt: skip
            return bool(cur.rowcount)

    async def remove(self, cron_id: str) -> bool:
        try:
            await self.runs.aunschedule(cron_id)
        except ScheduleNotFoundError:
            return False
        return True

    async def tick(self, now: float) -> int:
        return await fire_due(self.runs, int(now))
