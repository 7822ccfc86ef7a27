"""Runs: made on a thread or stateless, streamed, waited for, joined, cancelled.

Every run is stored before its request is answered and executed by the server's runner;
a stream is read back from the run log (:func:`plait.serve.streams.follow`), so the first
request, a rejoin and a reconnect with ``Last-Event-ID`` read the same events with the same
ids. A client that goes away leaves its run going (``on_disconnect="continue"``, as
LangGraph's server does), unless it asked for ``"cancel"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import Request
from starlette.responses import Response, StreamingResponse

from plait.errors import (
    CheckpointNotFoundError,
    RunNotFoundError,
    ServeRequestError,
    ThreadNotFoundError,
)
from plait.serve.kernel import Server, read_body, server_of
from plait.serve.records import RunRecord, ThreadRecord
from plait.serve.requests import MULTITASK, run_kwargs
from plait.serve.routing import Routes
from plait.serve.streams import follow, sse_frame, thread_key
from plait.serve.wire import json_response, run_json
from plait.tracing import carrier

__all__ = ["make_run", "router"]

router = Routes()


async def _create(
    server: Server, thread_id: str | None, body: Mapping[str, Any], request: Request | None = None
) -> RunRecord:
    """Check ``body``, store its run (and the thread of a stateless run) and queue it. The run's
    spans, when traced, continue the caller's trace: the current span's (a server that is
    itself instrumented), else the ``traceparent`` header of ``request`` (None: a cron's run)."""
    assistant_id = body.get("assistant_id")
    if not isinstance(assistant_id, str):
        raise ServeRequestError("assistant_id", "is required: the graph's name or its assistant id")
    assistant = server.assistants.find(assistant_id)
    kwargs = run_kwargs(body)
    trace = carrier.current() or (carrier.from_headers(request.headers) if request is not None else None)
    if trace is not None:
        kwargs["trace"] = trace
    multitask = body.get("multitask_strategy") or "enqueue"
    if multitask not in MULTITASK:
        raise ServeRequestError("multitask_strategy", f"must be one of {', '.join(MULTITASK)}")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ServeRequestError("metadata", "must be a JSON object")
    after = body.get("after_seconds")
    if after is not None and (not isinstance(after, int | float) or after < 0):
        raise ServeRequestError("after_seconds", "must be a number of seconds (0 or more)")
    now = server.clock()
    if after:
        kwargs["after"] = now + float(after)
    wanted = kwargs.get("checkpoint_id")
    if thread_id is not None and wanted is not None and await server.checkpointer.aget(thread_id, wanted) is None:
        raise CheckpointNotFoundError(thread_id, wanted, "")
    tags = {"graph_id": assistant.name, "assistant_id": assistant.assistant_id}
    thread_id, temporary, retag = await _thread_of_run(server, thread_id, body, tags, now)
    run = RunRecord(
        run_id=str(uuid.uuid4()), thread_id=thread_id, assistant_id=assistant.assistant_id, graph=assistant.name,
        metadata=metadata, kwargs=kwargs, multitask=multitask, created_at=now, updated_at=now, temporary=temporary,
    )  # fmt: skip
    created = await server.runner.create(run, thread_tags=retag)
    server.notifier.notify(thread_key(thread_id))  # a stream of the thread goes on to it
    return created


async def _thread_of_run(
    server: Server, thread_id: str | None, body: Mapping[str, Any], tags: dict[str, str], now: float
) -> tuple[str, bool, dict[str, str] | None]:
    """The run's thread, made if need be, whether it is a stateless run's (dropped when the
    run ends), and the tags its metadata lacks: the graph's (agent-chat-ui lists threads by
    ``graph_id``/``assistant_id``), merged by the runner in the run's own transaction.

    Raises:
        ThreadNotFoundError: no such thread, and the run did not ask for it to be made.
    """
    if thread_id is None:
        thread_id = str(uuid.uuid4())
        temporary = (body.get("on_completion") or "delete") == "delete"
        if not temporary:
            made = ThreadRecord(thread_id=thread_id, metadata=tags, created_at=now, updated_at=now)
            await server.log.put_thread(made)
        return thread_id, temporary, None
    record = await server.log.get_thread(thread_id)
    if record is None:
        stored = await server.checkpointer.aget_thread(thread_id) is not None
        if not stored and (body.get("if_not_exists") or "reject") != "create":
            raise ThreadNotFoundError(thread_id)
        record, _ = await server.log.put_thread(
            ThreadRecord(thread_id=thread_id, metadata={}, created_at=now, updated_at=now)
        )
    retag = any(record.metadata.get(k) != v for k, v in tags.items())  # a thread's later runs write nothing here
    return thread_id, False, tags if retag else None


make_run = _create
"""Make a run as ``POST /threads/{thread_id}/runs`` (``None``: ``POST /runs``) does from a
request body: what a cron's ticks make their runs with (:mod:`plait.serve.crons`)."""


def _after(request: Request) -> int:
    """Where a stream resumes: after the ``Last-Event-ID`` the client has (``-1``: from the
    start, as ``useStream`` asks by default)."""
    given = request.headers.get("last-event-id")
    if not given or given == "-1":
        return 0
    try:
        after = int(given)
    except ValueError:
        raise ServeRequestError("Last-Event-ID", f"{given!r} is not an event id this server sent") from None
    return max(after, 0)


def _stream(server: Server, run: RunRecord, after: int, *, cancel_on_disconnect: bool, location: str) -> Response:
    async def frames() -> AsyncIterator[bytes]:
        finished = False
        try:
            # Closed here, not left to the garbage collector, when the client goes away: the
            # reader's count (Notifier.reading) goes down at once.
            async with contextlib.aclosing(
                follow(server.log, server.notifier, run.run_id, after, lambda: server.runner.is_active(run.run_id))
            ) as events:
                async for event in events:
                    yield b": heartbeat\n\n" if event is None else sse_frame(event)
            finished = True
        finally:
            if not finished and cancel_on_disconnect:
                asyncio.get_running_loop().create_task(_cancel_quietly(server, run.run_id))

    headers = {
        "Content-Location": location,
        "Location": f"{location}/stream",
        "Cache-Control": "no-store",
        "X-Accel-Buffering": "no",
    }
    return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)


async def _cancel_quietly(server: Server, run_id: str) -> None:
    with contextlib.suppress(RunNotFoundError):
        await server.runner.cancel(run_id, "interrupt")


def _output(run: RunRecord) -> Any:
    if run.status in ("error", "timeout"):
        return {"__error__": run.error or {"error": "Error", "message": "the run failed"}}
    return run.output if run.output is not None else {}


async def _run_of(server: Server, thread_id: str, run_id: str) -> RunRecord:
    run = await server.log.get_run(run_id)
    if run is None or run.thread_id != thread_id:
        raise RunNotFoundError(run_id)
    return run


# -- on a thread ---------------------------------------------------------------------------------


async def _create_and_stream(request: Request, thread_id: str | None) -> Response:
    server = server_of(request)
    body = await read_body(request)
    run = await _create(server, thread_id, body, request)
    cancel = body.get("on_disconnect") == "cancel"
    return _stream(server, run, 0, cancel_on_disconnect=cancel, location=f"/threads/{run.thread_id}/runs/{run.run_id}")


@router.post("/threads/{thread_id}/runs/stream")
async def stream_run(thread_id: str, request: Request) -> Response:
    return await _create_and_stream(request, thread_id)


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    run = await _create(server, thread_id, await read_body(request), request)
    done = await server.runner.join(run.run_id)
    return json_response(_output(done), headers={"Content-Location": f"/threads/{thread_id}/runs/{run.run_id}"})


@router.post("/threads/{thread_id}/runs")
async def create_run(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    run = await _create(server, thread_id, await read_body(request), request)
    return json_response(run_json(run), headers={"Content-Location": f"/threads/{thread_id}/runs/{run.run_id}"})


@router.get("/threads/{thread_id}/runs")
async def list_runs(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    await server.thread_record(thread_id)
    params = request.query_params
    try:
        limit, offset = int(params.get("limit", 10)), int(params.get("offset", 0))
    except ValueError:
        raise ServeRequestError("limit/offset", "must be whole numbers") from None
    runs = list(reversed(await server.log.runs_of(thread_id, status=params.get("status"))))
    return json_response([run_json(r) for r in runs[offset : offset + limit]])


@router.get("/threads/{thread_id}/runs/{run_id}")
async def get_run(thread_id: str, run_id: str, request: Request) -> Response:
    return json_response(run_json(await _run_of(server_of(request), thread_id, run_id)))


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(thread_id: str, run_id: str, request: Request) -> Response:
    server = server_of(request)
    await _run_of(server, thread_id, run_id)
    if not _flag(request, "cancel_on_disconnect"):
        return json_response(_output(await server.runner.join(run_id)))
    try:
        done = await server.runner.join(run_id)
    except asyncio.CancelledError:  # the client went away while it waited: it asked for the run to stop
        asyncio.get_running_loop().create_task(_cancel_quietly(server, run_id))
        raise
    return json_response(_output(done))


def _flag(request: Request, name: str) -> bool:
    """A query flag as the SDKs send it (``true``/``false`` from Python, ``1``/``0`` from JS)."""
    return request.query_params.get(name, "false").lower() in ("true", "1")


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def rejoin_stream(thread_id: str, run_id: str, request: Request) -> Response:
    server = server_of(request)
    run = await _run_of(server, thread_id, run_id)
    location = f"/threads/{thread_id}/runs/{run_id}"
    return _stream(
        server, run, _after(request), cancel_on_disconnect=_flag(request, "cancel_on_disconnect"), location=location
    )


@router.get("/runs/{run_id}/stream")
async def rejoin_stateless(run_id: str, request: Request) -> Response:
    """A run's stream by its id alone (a stateless run's, which has no thread to name)."""
    server = server_of(request)
    run = await server.log.get_run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    location = f"/threads/{run.thread_id}/runs/{run_id}"
    return _stream(
        server, run, _after(request), cancel_on_disconnect=_flag(request, "cancel_on_disconnect"), location=location
    )


@router.post("/runs/cancel")
async def cancel_many(request: Request) -> Response:
    """Cancel several runs: ``run_ids`` of ``thread_id``, or every run of ``status``
    (``pending``, ``running`` or ``all``)."""
    server = server_of(request)
    body = await read_body(request)
    action = request.query_params.get("action", "interrupt")
    if action not in ("interrupt", "rollback"):
        raise ServeRequestError("action", "must be 'interrupt' or 'rollback'")
    thread_id, run_ids, status = body.get("thread_id"), body.get("run_ids"), body.get("status")
    if run_ids is not None:
        if not isinstance(run_ids, list) or not isinstance(thread_id, str):
            raise ServeRequestError("run_ids", "come with their thread_id: {thread_id, run_ids: [...]}")
        chosen = [await _run_of(server, thread_id, rid) for rid in run_ids]
    elif status in ("pending", "running", "all") and isinstance(thread_id, str):
        chosen = [r for r in await server.log.active_runs(thread_id) if status in ("all", r.status)]
    else:
        raise ServeRequestError("request body", "name the runs: {thread_id, run_ids} or {thread_id, status}")
    for run in chosen:
        if not run.done:
            await server.runner.cancel(run.run_id, action)
    return Response(status_code=204)


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(thread_id: str, run_id: str, request: Request) -> Response:
    server = server_of(request)
    await _run_of(server, thread_id, run_id)
    params = request.query_params
    action = params.get("action", "interrupt")
    if action not in ("interrupt", "rollback"):
        raise ServeRequestError("action", "must be 'interrupt' or 'rollback'")
    await server.runner.cancel(run_id, action)
    if _flag(request, "wait"):
        with contextlib.suppress(RunNotFoundError):  # rolled back: the run is gone with what it wrote
            await server.runner.join(run_id)
        return Response(status_code=204)
    return Response(status_code=202)


@router.delete("/threads/{thread_id}/runs/{run_id}")
async def delete_run(thread_id: str, run_id: str, request: Request) -> Response:
    server = server_of(request)
    run = await _run_of(server, thread_id, run_id)
    if not run.done:
        raise ServeRequestError("run", "is still pending or running; cancel it first")
    await server.log.delete_run(run_id)
    return Response(status_code=204)


# -- stateless -----------------------------------------------------------------------------------


@router.post("/runs/stream")
async def stream_stateless(request: Request) -> Response:
    return await _create_and_stream(request, None)


@router.post("/runs/wait")
async def wait_stateless(request: Request) -> Response:
    server = server_of(request)
    run = await _create(server, None, await read_body(request), request)
    done = await server.runner.join(run.run_id)
    return json_response(_output(done))


@router.post("/runs")
async def create_stateless(request: Request) -> Response:
    server = server_of(request)
    run = await _create(server, None, await read_body(request), request)
    return json_response(run_json(run))
