"""A thread's stream (``GET /threads/{thread_id}/stream``, the SDKs' ``threads.join_stream``):
the events of the thread's runs, one run after another as they were made, read back from the
run log as each run's own stream is (:func:`plait.serve.streams.follow`).

``stream_mode`` (repeatable) chooses what is sent: ``run_modes`` (the default), each run's
own events (what its ``runs.stream`` sent, from its ``metadata`` event on) and then a
``run_done`` event; ``lifecycle``, a ``run_start`` event when a run has begun and a
``run_done`` event when it has ended. ``state_update`` is refused (not served yet).

Joined without ``Last-Event-ID``, the stream sends the thread's pending and running runs
from their first event, then every run made after; it stays open (with heartbeats) until
the client goes away or the thread is deleted. Every event's id is ``<run_id>:<n>`` (``n``
the run's own event number, ``0`` for its ``run_start``, ``done`` for its ``run_done``), so
a client that comes back with the last id it read gets every later event once: the rest of
that run, then each later run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from starlette.responses import Response, StreamingResponse

from plait.errors import ServeRequestError, ThreadNotFoundError
from plait.serve.kernel import Server, server_of
from plait.serve.records import RunRecord
from plait.serve.routing import Routes
from plait.serve.streams import HEARTBEAT, follow, thread_key
from plait.serve.wire import dumps

__all__ = ["follow_thread", "router"]

router = Routes()

MODES = ("run_modes", "lifecycle")
_HEARTBEAT = b": heartbeat\n\n"


def _frame(event_id: str, name: str, data: bytes) -> bytes:
    return f"id: {event_id}\nevent: {name}\n".encode() + b"data: " + data + b"\n\n"


def _modes(request: Request) -> frozenset[str]:
    given = request.query_params.getlist("stream_mode") or ["run_modes"]
    for mode in given:
        if mode == "state_update":
            raise ServeRequestError(
                "stream_mode", "'state_update' is not served yet; use 'run_modes' (each run's values) or 'lifecycle'"
            )
        if mode not in MODES:
            raise ServeRequestError("stream_mode", f"{mode!r} is not a thread stream mode: use {' or '.join(MODES)}")
    return frozenset(given)


def _resume_point(request: Request) -> tuple[str, int | None] | None:
    """The run and event after which the client's last stream stopped (None: it has none;
    ``(run_id, None)``: it read that run's end)."""
    given = request.headers.get("last-event-id")
    if not given or given == "-1":
        return None
    run_id, _, n = given.rpartition(":")
    if run_id and n == "done":
        return run_id, None
    if run_id and n.isdigit():
        return run_id, int(n)
    raise ServeRequestError(
        "Last-Event-ID", f"{given!r} is not an id of this thread's stream (they look like '<run_id>:<n>')"
    )


async def _run_frames(server: Server, run: RunRecord, after: int | None, modes: frozenset[str]) -> AsyncIterator[bytes]:
    """One run's part of the thread's stream, from after its event ``after`` (None: nothing
    of it sent yet; 0: only its ``run_start``)."""
    started = after is not None
    active = lambda: server.runner.is_active(run.run_id)  # noqa: E731
    async with contextlib.aclosing(follow(server.log, server.notifier, run.run_id, after or 0, active)) as events:
        async for event in events:  # (closed at once when the client goes away: see routes_runs)
            if event is None:
                yield _HEARTBEAT
                continue
            if "lifecycle" in modes and not started:
                started = True
                begun = {"run_id": run.run_id, "thread_id": run.thread_id, "assistant_id": run.assistant_id}
                yield _frame(f"{run.run_id}:0", "run_start", dumps(begun))
            if "run_modes" in modes:
                yield _frame(f"{run.run_id}:{event.seq}", event.event, event.data)
    ended = await server.log.get_run(run.run_id)
    status = ended.status if ended is not None else "interrupted"  # rolled back: the run is gone
    done: dict[str, Any] = {"run_id": run.run_id, "thread_id": run.thread_id, "status": status}
    yield _frame(f"{run.run_id}:done", "run_done", dumps(done))


async def _start(
    server: Server, thread_id: str, resume: tuple[str, int | None] | None
) -> tuple[set[str], dict[str, int | None]]:
    """The runs a new stream of the thread sends nothing of, and where it resumes a run.

    Raises:
        ServeRequestError: ``Last-Event-ID`` names no run of the thread.
    """
    runs = await server.log.runs_of(thread_id)
    ids = [r.run_id for r in runs]
    if resume is None:
        return {r.run_id for r in runs if r.done}, {}
    if resume[0] not in ids:
        raise ServeRequestError("Last-Event-ID", f"names no run of thread {thread_id!r}: join the thread afresh")
    position = ids.index(resume[0])
    return set(ids[: position + (1 if resume[1] is None else 0)]), {resume[0]: resume[1]}


async def follow_thread(
    server: Server,
    thread_id: str,
    sent: set[str],
    after: dict[str, int | None],
    modes: frozenset[str],
    *,
    heartbeat: float = HEARTBEAT,
) -> AsyncIterator[bytes]:
    """The thread's stream as SSE frames (see the module's docstring): every run not in
    ``sent``, oldest first, each from after its event in ``after``; ends when the thread is
    deleted."""
    key = thread_key(thread_id)
    while True:
        fut = server.notifier.register(key)
        try:
            waiting = [r for r in await server.log.runs_of(thread_id) if r.run_id not in sent]
            if not waiting:
                try:
                    await server.thread_record(thread_id)
                except ThreadNotFoundError:
                    return
                try:
                    await asyncio.wait_for(fut, heartbeat)
                except TimeoutError:  # a run made by another process (a worker's cron) shows up here too
                    yield _HEARTBEAT
                continue
        finally:
            server.notifier.discard(key, fut)
        run = waiting[0]
        async for frame in _run_frames(server, run, after.pop(run.run_id, None), modes):
            yield frame
        sent.add(run.run_id)


@router.get("/threads/{thread_id}/stream")
async def join_thread_stream(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    await server.thread_record(thread_id)
    modes = _modes(request)
    sent, after = await _start(server, thread_id, _resume_point(request))
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        follow_thread(server, thread_id, sent, after, modes), media_type="text/event-stream", headers=headers
    )
