"""Crons: a run made at each tick of a cron schedule, on a thread or stateless.

A cron's request is checked as its runs' requests will be (its assistant, input, stream
modes, multitask strategy) before anything is stored, so a cron whose runs could not start
is refused when it is made, not at its first tick. Where crons are kept and who fires them
is :mod:`plait.serve.crons`' part, reached through ``request.app.state.crons``.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from fastapi import Request
from starlette.exceptions import HTTPException
from starlette.responses import Response

from plait.errors import ServeRequestError
from plait.serve.crons import (
    CronRecord,
    Crons,
    Fire,
    SqliteCrons,
    check_schedule,
    cron_json,
    parse_time,
    run_body,
    same_metadata,
)
from plait.serve.kernel import Server, read_body, server_of
from plait.serve.log import RunLog
from plait.serve.requests import MULTITASK, run_kwargs
from plait.serve.routing import Routes
from plait.serve.sqlite_log import SqliteRunLog
from plait.serve.wire import json_response

__all__ = ["open_crons", "router"]

router = Routes()

_UTC = (None, "UTC", "Etc/UTC")
_SORTS = ("cron_id", "assistant_id", "thread_id", "created_at", "updated_at", "next_run_date", "end_time")


def open_crons(log: RunLog, fire: Fire) -> Crons:
    """The crons of a server whose run log is ``log``: in the SQLite log, fired by the server;
    on PostgreSQL, :mod:`plait.runs`' schedules, fired by the run queue's workers."""
    if isinstance(log, SqliteRunLog):
        return SqliteCrons(log, fire)
    from plait.serve.pg_crons import PgCrons
    from plait.serve.pg_log import PgRunLog

    assert isinstance(log, PgRunLog)
    return PgCrons(log.runs)


def _crons_of(request: Request) -> Crons:
    crons: Crons = request.app.state.crons
    return crons


def _checked(server: Server, crons: Crons, cron: CronRecord) -> CronRecord:
    """``cron`` with its assistant resolved, refused (422, 404 for an unknown assistant)
    when its runs could not be made or its store cannot keep it."""
    if cron.timezone not in _UTC:
        raise ServeRequestError("timezone", "only UTC is supported yet: write the schedule in UTC")
    if cron.on_run_completed not in (None, "delete", "keep"):
        raise ServeRequestError("on_run_completed", "must be 'delete' or 'keep'")
    if not isinstance(cron.metadata, dict):
        raise ServeRequestError("metadata", "must be a JSON object")
    body = run_body(cron, 0)
    assistant_id = body.get("assistant_id")
    if not isinstance(assistant_id, str):
        raise ServeRequestError("assistant_id", "is required: the graph's name or its assistant id")
    assistant = server.assistants.find(assistant_id)
    run_kwargs(body)
    if (body.get("multitask_strategy") or "enqueue") not in MULTITASK:
        raise ServeRequestError("multitask_strategy", f"must be one of {', '.join(MULTITASK)}")
    checked = dataclasses.replace(cron, assistant_id=assistant.assistant_id, graph=assistant.name)
    crons.refuse(checked)
    return checked


def _enabled(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ServeRequestError("enabled", "must be true or false")
    return value


async def _create(request: Request, thread_id: str | None) -> Response:
    server, crons = server_of(request), _crons_of(request)
    body = await read_body(request)
    if thread_id is not None:
        await server.thread_record(thread_id)
    now = server.clock()
    cron = CronRecord(
        cron_id=str(uuid.uuid4()), assistant_id="", graph="", thread_id=thread_id,
        schedule=check_schedule(body.get("schedule")), payload=dict(body), metadata=body.get("metadata") or {},
        on_run_completed=None if thread_id is not None else body.get("on_run_completed") or "delete",
        end_time=parse_time(body.get("end_time"), "end_time"), enabled=_enabled(body.get("enabled", True)),
        timezone=body.get("timezone"), created_at=now, updated_at=now, last_tick=now,
    )  # fmt: skip
    cron = _checked(server, crons, cron)
    await crons.add(cron)
    return json_response(cron_json(cron))


@router.post("/threads/{thread_id}/runs/crons")
async def create_thread_cron(thread_id: str, request: Request) -> Response:
    """A cron whose runs go to the thread, one after another (the thread must exist)."""
    return await _create(request, thread_id)


@router.post("/runs/crons")
async def create_cron(request: Request) -> Response:
    """A stateless cron: each tick's run gets a new thread (``on_run_completed``: ``delete``
    it when the run ends, the default, or ``keep`` it)."""
    return await _create(request, None)


async def _cron(crons: Crons, cron_id: str) -> CronRecord:
    found = await crons.get(cron_id)
    if found is None:
        raise HTTPException(404, f"cron {cron_id!r} not found")
    return found


@router.patch("/runs/crons/{cron_id}")
async def update_cron(cron_id: str, request: Request) -> Response:
    """Change a cron: its schedule, its runs' request, ``enabled``, ``end_time`` (null clears
    it). A new schedule, or enabling a paused cron, counts from now: ticks before are not fired."""
    server, crons = server_of(request), _crons_of(request)
    cron = await _cron(crons, cron_id)
    body = await read_body(request)
    now = server.clock()
    schedule = check_schedule(body.get("schedule", cron.schedule))
    enabled = _enabled(body.get("enabled", cron.enabled))
    restart = schedule != cron.schedule or (enabled and not cron.enabled)
    completed = body.get("on_run_completed", cron.on_run_completed) if cron.thread_id is None else None
    changed = dataclasses.replace(
        cron, schedule=schedule, enabled=enabled, payload={**cron.payload, **body},
        metadata=body.get("metadata", cron.metadata), timezone=body.get("timezone", cron.timezone),
        on_run_completed=completed,
        end_time=parse_time(body["end_time"], "end_time") if "end_time" in body else cron.end_time,
        updated_at=now, last_tick=max(cron.last_tick, now) if restart else cron.last_tick,
    )  # fmt: skip
    changed = _checked(server, crons, changed)
    if not await crons.save(changed):
        raise HTTPException(404, f"cron {cron_id!r} not found")
    return json_response(cron_json(changed))


@router.delete("/runs/crons/{cron_id}")
async def delete_cron(cron_id: str, request: Request) -> Response:
    """Delete a cron; the runs it made stay."""
    if not await _crons_of(request).remove(cron_id):
        raise HTTPException(404, f"cron {cron_id!r} not found")
    return Response(status_code=204)


async def _matching(request: Request, body: dict[str, Any]) -> list[CronRecord]:
    """The crons the search or count body asks for: of an assistant (id or graph name), of a
    thread, enabled or not, with metadata."""
    assistant, thread_id, enabled = body.get("assistant_id"), body.get("thread_id"), body.get("enabled")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ServeRequestError("metadata", "must be a JSON object")
    return [
        c
        for c in await _crons_of(request).all()
        if assistant in (None, c.assistant_id, c.graph)
        and thread_id in (None, c.thread_id)
        and enabled in (None, c.enabled)
        and same_metadata(c, metadata)
    ]


@router.post("/runs/crons/search")
async def search_crons(request: Request) -> Response:
    body = await read_body(request)
    sort_by, order = body.get("sort_by") or "created_at", body.get("sort_order") or "desc"
    if sort_by not in _SORTS:
        raise ServeRequestError("sort_by", f"must be one of {', '.join(_SORTS)}")
    if order not in ("asc", "desc"):
        raise ServeRequestError("sort_order", "must be 'asc' or 'desc'")
    limit, offset = body.get("limit", 10), body.get("offset", 0)
    if not isinstance(limit, int) or not isinstance(offset, int) or limit < 0 or offset < 0:
        raise ServeRequestError("limit/offset", "must be whole numbers (0 or more)")
    docs = [cron_json(c) for c in await _matching(request, body)]
    docs.sort(key=lambda d: (d[sort_by] is not None, str(d[sort_by] or "")), reverse=order == "desc")
    docs = docs[offset : offset + limit]
    select = body.get("select")
    if select:
        docs = [{k: d[k] for k in select if k in d} for d in docs]
    return json_response(docs)


@router.post("/runs/crons/count")
async def count_crons(request: Request) -> Response:
    return json_response(len(await _matching(request, await read_body(request))))
