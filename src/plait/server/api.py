"""The JSON API under ``/api/``, named after the nouns of LangGraph's platform API.

Reads go through :mod:`plait.inspect`; writes through :class:`~plait.server.studio.Studio`'s
actions, each behind :func:`~plait.server.studio.check_write` (Origin and CSRF token). Two kinds
of run: ``/api/threads/{id}/runs`` are Studio runs (started here, in this process);
``/api/runs`` are the run queue's (:mod:`plait.runs`, served by ``plait worker``), read and
cancelled through :mod:`plait.server.queue`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field

from plait import inspect as ins
from plait.errors import CheckpointNotFoundError, GraphRequiredError
from plait.inspect_json import checkpoint_diff_json, checkpoint_json, iso, summary_json, thread_json
from plait.server.graphs import graph_svg
from plait.server.http import StudioRefusal, json_response
from plait.server.live import changes_of
from plait.server.paths import THREAD_ID
from plait.server.queue import CANCEL_WAIT, PAGE
from plait.server.studio import check_write, studio_of

if TYPE_CHECKING:
    from plait.runs.records import Run

__all__ = ["ERRORS", "RunStatusQ", "router", "run_json"]


class ErrorBody(BaseModel):
    """What every refused request gets: plait's error class and its message."""

    error: str = Field(description="The error class (CheckpointNotFoundError, ...).")
    message: str = Field(description="What happened, where, and what to do.")


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "Bad input: plait's error says why."},
    403: {"model": ErrorBody, "description": "A write without this Studio's Origin and CSRF token."},
    404: {
        "model": ErrorBody,
        "description": "No such thread, checkpoint, channel, run or memory item, or no run queue or memory store here.",
    },
    409: {"model": ErrorBody, "description": "The thread is busy, moved on, or already exists."},
    422: {"model": ErrorBody, "description": "The request does not have the documented shape."},
}

router = APIRouter(prefix="/api", responses=ERRORS)

Namespace = Annotated[str, Query(description="The threads' namespace.")]
StatusQ = Literal["idle", "busy", "interrupted", "error", "ready", "stale"]
RunStatusQ = Literal["pending", "running", "interrupted", "success", "error", "cancelled", "timeout"]
"""A queued run's status: ``plait.runs.RUN_STATUSES``, written out because importing
:mod:`plait.runs` needs the runs extra (a test holds the two equal)."""


def run_json(run: Run, *, full: bool = True) -> dict[str, Any]:
    """A queued run as the API gives it (times ISO 8601 UTC); a list's rows leave out the
    values (``full=False``), as a thread list leaves out its heads' values."""
    out: dict[str, Any] = {
        "run_id": run.run_id,
        "graph": run.graph,
        "thread_id": run.thread_id,
        "namespace": run.namespace,
        "status": run.status,
        "multitask": run.multitask,
        "queue": run.queue,
        "priority": run.priority,
        "timeout": run.timeout,
        "attempts": run.attempts,
        "worker": run.worker,
        "error": run.error,
        "schedule_id": run.schedule_id,
        "tick": run.tick,
        "created_at": iso(run.created_at),
        "started_at": None if run.started_at is None else iso(run.started_at),
        "finished_at": None if run.finished_at is None else iso(run.finished_at),
        "updated_at": iso(run.updated_at),
        "cancellable": not run.done,
    }
    if full:
        out |= {
            "input": run.input,
            "resume": run.resume,
            "has_resume": run.has_resume,
            "context": run.context,
            "metadata": run.metadata,
            "output": run.output,
            "start_checkpoint": run.start_checkpoint,
        }
    return out


def _metadata(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f'metadata={text!r} is not JSON: give an object such as {{"source": "loop"}}') from None
    if not isinstance(data, dict):
        raise ValueError(f"metadata={text!r} must be a JSON object of key: value to match")
    return data


# -- reads -------------------------------------------------------------------------------------


@router.get("/threads", summary="List threads, most recently active first")
async def list_threads(
    request: Request,
    status: StatusQ | None = None,
    q: Annotated[str | None, Query(description="Thread ids starting with this.")] = None,
    metadata: Annotated[str | None, Query(description="A JSON object the head's metadata must match.")] = None,
    namespace: Annotated[str | None, Query(description="Only this namespace (default: all).")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> Response:
    studio = studio_of(request)
    page = await ins.list_threads(
        studio.checkpointer,
        namespace=namespace,
        status=status,
        prefix=q or None,
        metadata=_metadata(metadata),
        limit=limit,
        before=cursor or None,
    )
    return json_response(
        {"threads": [thread_json(t, paging=True) for t in page.threads], "next_cursor": page.next_cursor}
    )


@router.get(f"/threads/{THREAD_ID}", summary="One thread's summary")
async def get_thread(request: Request, thread_id: str, namespace: Namespace = "") -> Response:
    studio = studio_of(request)
    summary = await ins.thread_summary(studio.checkpointer, thread_id, namespace=namespace)
    out = summary_json(summary)
    studio.traces.add_to(out["head"])
    out["runs"] = [r.to_json() for r in studio.studio_runs.of_thread(thread_id, namespace)]
    return json_response(out)


@router.get(f"/threads/{THREAD_ID}/history", summary="A thread's checkpoints, newest first")
async def get_history(
    request: Request,
    thread_id: str,
    namespace: Namespace = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[str | None, Query(description="next_before of the previous page.")] = None,
    values: Annotated[bool, Query(description="Include each checkpoint's values.")] = False,
) -> Response:
    studio = studio_of(request)
    page, more = await ins.history(
        studio.checkpointer, thread_id, namespace=namespace, limit=limit, before=before or None
    )
    return json_response(
        {
            "checkpoints": [studio.traces.add_to(checkpoint_json(cp, values=values, detail=True)) for cp in page],
            "next_before": more,
        }
    )


@router.get(f"/threads/{THREAD_ID}/state", summary="The state at a checkpoint (the head by default)")
async def get_state(
    request: Request,
    thread_id: str,
    namespace: Namespace = "",
    checkpoint_id: str | None = None,
    key: Annotated[str | None, Query(description="Only this channel's value (what the page loads lazily).")] = None,
) -> Response:
    studio = studio_of(request)
    cp = await ins.get_checkpoint(studio.checkpointer, thread_id, checkpoint_id or None, namespace=namespace)
    if key is not None:
        if key not in cp.values:
            raise CheckpointNotFoundError(thread_id, f"{cp.id} (channel {key!r})", namespace)
        return json_response({"key": key, "value": cp.values[key]})
    return json_response(studio.traces.add_to(checkpoint_json(cp, detail=True)))


@router.get(
    f"/threads/{THREAD_ID}/changes",
    summary="What a checkpoint changed against its parent (a fork's root: against its source)",
)
async def get_changes(
    request: Request,
    thread_id: str,
    namespace: Namespace = "",
    checkpoint_id: str | None = None,
    key: Annotated[str | None, Query(description="Only this channel's change (what the page loads lazily).")] = None,
) -> Response:
    studio = studio_of(request)
    d = await ins.changes(studio.checkpointer, thread_id, checkpoint_id or None, namespace=namespace)
    return _diff_response(d, key)


def _diff_response(d: ins.CheckpointDiff, key: str | None) -> Response:
    """The diff, or with ``key`` only that channel's part, ``{"key", "value"}``: what the page
    loads when a change was too large to send with it."""
    if key is None:
        return json_response(checkpoint_diff_json(d))
    found = next((c for c in d.channels if c.key == key), None)
    if found is None:
        raise CheckpointNotFoundError(d.b.thread_id, f"{d.b.id} (a change of channel {key!r})", d.b.namespace)
    return json_response({"key": key, "value": found.to_json()})


@router.get("/diff", summary="The per-channel diff of two checkpoints, of one thread or two")
async def get_diff(
    request: Request,
    a: Annotated[str, Query(description="THREAD or THREAD@CHECKPOINT")],
    b: Annotated[str, Query(description="THREAD or THREAD@CHECKPOINT")],
    namespace: Namespace = "",
    key: Annotated[str | None, Query(description="Only this channel's part (what the page loads lazily).")] = None,
) -> Response:
    studio = studio_of(request)
    d = await ins.diff_checkpoints(studio.checkpointer, ins.parse_ref(a, namespace), ins.parse_ref(b, namespace))
    return _diff_response(d, key)


@router.get("/graphs", summary="The graphs this Studio can act with")
async def list_graphs(request: Request) -> Response:
    studio = studio_of(request)
    return json_response(
        [
            {"name": n, "fingerprint": g.fingerprint, "nodes": list(g.spec.nodes), "namespace": g.namespace}
            for n, g in studio.graphs.items()
        ]
    )


@router.get("/graphs/{name}/svg", summary="The graph's picture, a thread's next and running nodes highlighted")
async def get_graph_svg(
    request: Request, name: str, thread_id: str | None = None, namespace: Namespace = ""
) -> Response:
    studio = studio_of(request)
    if name not in studio.graphs:
        raise GraphRequiredError("drawing a graph", f"no graph named {name!r}; see GET /api/graphs")
    svg = await graph_svg(studio, studio.graphs[name], thread_id, namespace)
    return Response(svg, media_type="image/svg+xml")


@router.get("/csrf", summary="The CSRF token every write must send (X-CSRF-Token)")
async def get_csrf(request: Request) -> Response:
    return json_response({"csrf_token": studio_of(request).guard.csrf, "header": "X-CSRF-Token"})


@router.get(f"/threads/{THREAD_ID}/runs", summary="Studio runs of this thread (started here, in this process)")
async def list_runs(request: Request, thread_id: str, namespace: Namespace = "") -> Response:
    return json_response([r.to_json() for r in studio_of(request).studio_runs.of_thread(thread_id, namespace)])


# -- live --------------------------------------------------------------------------------------


async def _thread_look(request: Request, thread_id: str, namespace: str) -> dict[str, Any]:
    studio = studio_of(request)
    info = await studio.checkpointer.aget_thread(thread_id, namespace=namespace)
    if info is None:
        return {"thread_id": thread_id, "deleted": True}
    head = await studio.checkpointer.aget(thread_id, namespace=namespace)
    running = sorted(studio.studio_runs.running_nodes(thread_id, namespace))
    queued: list[list[str]] = []
    if studio.queue.ready:  # found by the thread page already: no check here, a look a second
        found, _ = await studio.queue.page(thread_id=thread_id, namespace=namespace, limit=20)
        queued = [[r.run_id, r.status] for r in found]
    return {
        "thread_id": thread_id,
        "status": info.status,
        "checkpoint_id": info.head_id,
        "step": info.step,
        "checkpoints": info.checkpoints,
        "pending": len(head.pending_writes) if head else 0,
        "running": running,
        "runs": [r.status for r in studio.studio_runs.of_thread(thread_id, namespace)],
        "queue_runs": queued,
    }


_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


@router.get(f"/threads/{THREAD_ID}/events", summary="Server-sent events: the thread changed")
async def thread_events(request: Request, thread_id: str, namespace: Namespace = "") -> StreamingResponse:
    studio = studio_of(request)
    await ins.get_checkpoint(studio.checkpointer, thread_id, namespace=namespace)  # 404 for an unknown thread
    frames = changes_of(
        studio.watcher,
        lambda: _thread_look(request, thread_id, namespace),
        event="thread",
        is_disconnected=request.is_disconnected,
    )
    return StreamingResponse(frames, media_type="text/event-stream", headers=_SSE_HEADERS)


@router.get("/events", summary="Server-sent events: the thread list changed")
async def list_events(request: Request, status: StatusQ | None = None) -> StreamingResponse:
    studio = studio_of(request)

    async def look() -> list[Any]:
        rows = await studio.checkpointer.alist_threads(status=status, limit=50)
        return [[t.namespace, t.thread_id, t.head_id, t.status] for t in rows]

    frames = changes_of(studio.watcher, look, event="threads", is_disconnected=request.is_disconnected)
    return StreamingResponse(frames, media_type="text/event-stream", headers=_SSE_HEADERS)


# -- the run queue's runs ----------------------------------------------------------------------

RunThread = Annotated[str | None, Query(description="Only this thread's runs.")]
RunNamespace = Annotated[str | None, Query(description="Only this namespace (default: all).")]


@router.get("/runs", summary="The run queue's runs, newest first (404: the store has no run queue)")
async def list_queue_runs(
    request: Request,
    status: RunStatusQ | None = None,
    thread_id: RunThread = None,
    namespace: RunNamespace = None,
    graph: Annotated[str | None, Query(description="Only runs of this graph (its name, as submitted).")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = PAGE,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page.")] = None,
) -> Response:
    found, more = await studio_of(request).queue.page(
        status=status, thread_id=thread_id or None, namespace=namespace, graph=graph or None, limit=limit,
        before=cursor or None,
    )  # fmt: skip
    return json_response({"runs": [run_json(r, full=False) for r in found], "next_cursor": more})


@router.get("/runs/{run_id}", summary="One run of the run queue: its input, output and stored error")
async def get_queue_run(request: Request, run_id: str) -> Response:
    return json_response(run_json(await studio_of(request).queue.get(run_id)))


@router.get("/events/runs", summary="Server-sent events: the run queue's runs changed")
async def queue_run_events(
    request: Request, status: RunStatusQ | None = None, thread_id: RunThread = None, namespace: RunNamespace = None
) -> StreamingResponse:
    studio = studio_of(request)
    await studio.queue.client()  # 404 when there is no run queue, rather than a stream of errors

    async def look() -> list[Any]:
        found, _ = await studio.queue.page(status=status, thread_id=thread_id or None, namespace=namespace)
        return [[r.run_id, r.status, r.attempts] for r in found]  # what the rows show changing

    frames = changes_of(studio.watcher, look, event="runs", is_disconnected=request.is_disconnected)
    return StreamingResponse(frames, media_type="text/event-stream", headers=_SSE_HEADERS)


# -- writes ------------------------------------------------------------------------------------


class UpdateBody(BaseModel):
    values: dict[str, Any] = Field(description="Channel writes, folded through the reducers.")
    as_node: str | None = Field(None, description="Write as this node: the next tasks become its successors.")
    graph: str | None = None


class ForkBody(BaseModel):
    thread_id: str = Field(description="The new thread's id (it must not exist).")
    checkpoint_id: str | None = Field(None, description="The checkpoint to fork from (default: the head).")
    edits: dict[str, Any] | None = Field(None, description="Writes folded through the reducers (needs a graph).")
    graph: str | None = None


class RunBody(BaseModel):
    action: Literal["continue", "resume", "replay"] = Field(
        "continue",
        description="continue: from the head; resume: answer the waiting interrupt with `resume`; "
        "replay: run again from `checkpoint_id` (a new branch).",
    )
    resume: Any = None
    checkpoint_id: str | None = None
    graph: str | None = None


Write = Depends(check_write)


@router.post(f"/threads/{THREAD_ID}/state", dependencies=[Write], status_code=201, summary="Update the state")
async def post_state(request: Request, thread_id: str, body: UpdateBody, namespace: Namespace = "") -> Response:
    cid, writes = await studio_of(request).update(thread_id, namespace, body.values, body.as_node, body.graph)
    return json_response({"thread_id": thread_id, "checkpoint_id": cid, "writes": writes}, 201)


@router.post(f"/threads/{THREAD_ID}/fork", dependencies=[Write], status_code=201, summary="Fork into a new thread")
async def post_fork(request: Request, thread_id: str, body: ForkBody, namespace: Namespace = "") -> Response:
    cid = await studio_of(request).fork(
        thread_id, namespace, body.checkpoint_id, body.thread_id, body.edits, body.graph
    )
    return json_response({"thread_id": body.thread_id, "checkpoint_id": cid, "forked_from": thread_id}, 201)


@router.post(f"/threads/{THREAD_ID}/runs", dependencies=[Write], status_code=202, summary="Start a run")
async def post_run(request: Request, thread_id: str, body: RunBody, namespace: Namespace = "") -> Response:
    rec = await studio_of(request).run(thread_id, namespace, body.action, body.resume, body.checkpoint_id, body.graph)
    return json_response(rec.to_json(), 202)


@router.delete(
    f"/threads/{THREAD_ID}/runs/{{run_id}}", dependencies=[Write], summary="Cancel a Studio run (started here)"
)
async def cancel_run(request: Request, thread_id: str, run_id: str, namespace: Namespace = "") -> Response:
    studio = studio_of(request)
    rec = studio.studio_runs.get(run_id)
    if rec is None or rec.thread_id != thread_id or rec.namespace != namespace:
        raise StudioRefusal(404, f"no run {run_id!r} of thread {thread_id!r} was started from this Studio")
    await studio.studio_runs.cancel(rec)
    await studio.watcher.poke()
    return json_response(rec.to_json())


@router.post(
    "/runs/{run_id}/cancel",
    dependencies=[Write],
    summary="Cancel a run of the run queue (runs.cancel): a pending one never starts, a running one stops",
)
async def cancel_queue_run(
    request: Request,
    run_id: str,
    wait: Annotated[
        float, Query(ge=0, le=60, description="Seconds to wait for a running run's worker to end it.")
    ] = CANCEL_WAIT,
) -> Response:
    studio = studio_of(request)
    cancelled, run = await studio.queue.cancel(run_id, wait)
    await studio.watcher.poke()
    return json_response({"run_id": run_id, "cancelled": cancelled, "run": run_json(run)})


@router.delete(f"/threads/{THREAD_ID}", dependencies=[Write], summary="Delete a thread and all its checkpoints")
async def delete_thread(request: Request, thread_id: str, namespace: Namespace = "") -> Response:
    n = await studio_of(request).delete(thread_id, namespace)
    return json_response({"thread_id": thread_id, "namespace": namespace, "deleted": True, "checkpoints": n})
