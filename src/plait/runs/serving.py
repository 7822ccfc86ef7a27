"""Which live workers serve which graphs, so that a submit can say when nothing will run it.

A run names its graph by a string, and only a worker given a graph of that name can run it
(any other fails the run with :class:`~plait.errors.UnknownGraphError`); a run on a queue no
worker serves waits forever. Neither is wrong at submit time (a worker may start later), so
``plait submit`` and ``plait schedule`` warn rather than refuse, and for that they need to
know what the live workers serve. Procrastinate's worker table holds only ids and heartbeats,
so each plait worker advertises itself: a row ``worker:NAME`` in ``plait_run_meta`` (the
run tables' key-value table, so no migration) whose value is JSON ``{"graphs", "queues",
"expires"}``, written when the worker starts and every heartbeat after, deleted when it stops.
``expires`` is the database's clock plus the worker's ``stalled_after``: a worker that died
without deleting its row stops counting as live when the queue takes it for dead, whatever
the clocks of the machines involved. Rows expired long ago are deleted by the next advert.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LiveWorker", "live_workers", "start_advert", "unserved"]

log = logging.getLogger("plait.runs.worker")

_PREFIX = "worker:"
_EXPIRES = "CASE WHEN starts_with(key, 'worker:') THEN (value::jsonb ->> 'expires')::float8 END"
"""When an advert row expires; NULL for the table's other rows, whose values are no JSON (a
CASE, because PostgreSQL may test a WHERE's conditions in any order)."""
_FORGET_AFTER = 3600.0
"""Seconds after its expiry that a dead worker's row is deleted (kept a while: harmless)."""


@dataclass(frozen=True, slots=True)
class LiveWorker:
    """A worker that advertised itself and has not yet been taken for dead."""

    name: str
    graphs: tuple[str, ...]
    queues: tuple[str, ...]


async def _advertise(db: Any, name: str, graphs: Sequence[str], queues: Sequence[str], ttl: float) -> None:
    body = json.dumps({"graphs": list(graphs), "queues": list(queues)})
    async with db.connection() as conn, conn.cursor() as cur:
        await cur.execute(
            "INSERT INTO plait_run_meta (key, value) "
            "VALUES (%s, (%s::jsonb || jsonb_build_object('expires', extract(epoch FROM now()) + %s))::text) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (_PREFIX + name, body, ttl),
        )
        await cur.execute(
            f"DELETE FROM plait_run_meta WHERE {_EXPIRES} < extract(epoch FROM now()) - %s",
            (_FORGET_AFTER,),
        )


async def start_advert(
    db: Any, name: str, graphs: Iterable[str], queues: Sequence[str], every: float, ttl: float
) -> asyncio.Task[None]:
    """Advertise the worker now (so that it counts as live once it says it started), then
    every ``every`` seconds in the task returned, until that is cancelled, which deletes the
    row. A failed write (the database restarting) is logged and tried again at the next beat:
    an advert is a courtesy to submitters, never a reason for the worker to stop."""

    served = list(graphs)

    async def once() -> None:
        try:
            await _advertise(db, name, served, queues, ttl)
        except Exception as exc:
            log.warning("worker %s: could not advertise its graphs (%s); trying again", name, exc)

    async def beat() -> None:
        try:
            while True:
                await asyncio.sleep(every)
                await once()
        finally:
            try:
                async with db.connection() as conn, conn.cursor() as cur:
                    await cur.execute("DELETE FROM plait_run_meta WHERE key = %s", (_PREFIX + name,))
            except Exception as exc:  # its row expires by itself
                log.warning("worker %s: could not withdraw its advert (%s)", name, exc)

    await once()
    return asyncio.create_task(beat(), name="plait worker advert")


async def live_workers(db: Any) -> list[LiveWorker]:
    """The workers whose advert has not expired, by name."""
    async with db.connection() as conn, conn.cursor() as cur:
        await cur.execute(
            f"SELECT key, value FROM plait_run_meta WHERE {_EXPIRES} > extract(epoch FROM now()) ORDER BY key"
        )
        rows = await cur.fetchall()
    found = []
    for key, value in rows:
        data = json.loads(value)
        found.append(LiveWorker(key[len(_PREFIX) :], tuple(data.get("graphs") or ()), tuple(data.get("queues") or ())))
    return found


def unserved(workers: Sequence[LiveWorker], graph: str, queue: str) -> str | None:
    """Why no live worker will run ``graph`` on ``queue``, and what becomes of its runs meanwhile;
    None when one will."""
    if not workers:
        return f"no worker is running on this database, so runs of {graph} wait in the queue until one starts"
    on_queue = [w for w in workers if queue in w.queues]
    if not on_queue:
        queues = ", ".join(sorted({q for w in workers for q in w.queues}))
        return (
            f"no live worker serves queue {queue!r} (the {len(workers)} live worker(s) serve: {queues}), so runs "
            "there wait until one does"
        )
    if not any(graph in w.graphs for w in on_queue):
        graphs = ", ".join(sorted({g for w in on_queue for g in w.graphs}))
        return (
            f"no live worker on queue {queue!r} serves graph {graph!r} (they serve: {graphs}), so one of them "
            "will fail its runs with UnknownGraphError"
        )
    return None
