"""Threads: made, found, edited, copied and deleted; their state and history.

A thread of the API is a record in the run log (its metadata) over the checkpointer's
thread (its state). The state documents are :func:`plait.serve.wire.state_json`'s; the
history is every branch's checkpoints, newest first (:mod:`plait.serve.history`), as
``get_history`` expects; from a given ``checkpoint``, the lineage below it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from starlette.responses import Response

from plait.checkpoint.fork import copy_thread
from plait.errors import CheckpointMetadataReadOnlyError, CheckpointNotFoundError, ServeRequestError, ThreadExistsError
from plait.graph.records import ThreadState
from plait.serve.assistants import Assistant
from plait.serve.history import every_branch, holds
from plait.serve.kernel import Server, read_body, server_of
from plait.serve.records import ThreadRecord
from plait.serve.routing import Routes
from plait.serve.streams import thread_key
from plait.serve.wire import json_response, state_json, thread_json

__all__ = ["router"]

router = Routes()


def _metadata(body: Mapping[str, Any], key: str = "metadata") -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServeRequestError(key, "must be a JSON object")
    return value


def _int(body: Mapping[str, Any], key: str, default: int, low: int = 0) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ServeRequestError(key, f"must be a whole number of at least {low}")
    return value


@router.post("/threads")
async def create_thread(request: Request) -> Response:
    server = server_of(request)
    body = await read_body(request)
    given = body.get("thread_id")
    thread_id = given or str(uuid.uuid4())
    if not isinstance(thread_id, str):
        raise ServeRequestError("thread_id", "must be a string")
    if_exists = body.get("if_exists") or "raise"
    if if_exists not in ("raise", "do_nothing"):
        raise ServeRequestError("if_exists", "must be 'raise' or 'do_nothing'")
    now = server.clock()
    wanted = ThreadRecord(thread_id=thread_id, metadata=_metadata(body), created_at=now, updated_at=now)
    supersteps = body.get("supersteps")
    if supersteps is not None and not isinstance(supersteps, list):
        raise ServeRequestError("supersteps", "must be a list of {updates: [{values, as_node}]}")
    # an id this server just made has nothing stored under it
    stored_elsewhere = bool(given) and await server.checkpointer.aget_thread(thread_id) is not None
    record, created = await server.log.put_thread(wanted)
    if (not created or stored_elsewhere) and if_exists == "raise":
        raise ThreadExistsError(thread_id, advice="Choose a new thread id, or pass if_exists='do_nothing'.")
    if created and supersteps:
        await _seed(server, record, supersteps)
    elif created and not stored_elsewhere:  # no state and no runs yet: nothing to read back
        return json_response(thread_json(record, None, "idle"))
    return json_response(await server.thread_doc(record))


async def _seed(server: Server, record: ThreadRecord, supersteps: list[Any]) -> None:
    """A new thread's history given as updates, one checkpoint each, in order (how a client
    copies a conversation in): each update folded through the reducers as its ``as_node``."""
    graph = _graph_of(server, record).graph.bind(checkpointer=server.checkpointer)
    for i, step in enumerate(supersteps):
        updates = step.get("updates") if isinstance(step, Mapping) else None
        if not isinstance(updates, list):
            raise ServeRequestError(f"supersteps[{i}]", "must be {updates: [{values, as_node}, ...]}")
        for update in updates:
            if not isinstance(update, Mapping) or update.get("command") is not None:
                raise ServeRequestError(f"supersteps[{i}]", "each update is {values, as_node} (no command)")
            await graph.aupdate_state(record.thread_id, update.get("values") or {}, update.get("as_node"))


async def _matching(server: Server, body: Mapping[str, Any]) -> list[ThreadRecord]:
    ids = body.get("ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
        raise ServeRequestError("ids", "must be a list of thread ids")
    sort_by = body.get("sort_by") or "updated_at"
    order = body.get("sort_order") or "desc"
    if order not in ("asc", "desc"):
        raise ServeRequestError("sort_order", "must be 'asc' or 'desc'")
    records = await server.log.search_threads(
        metadata=_metadata(body), ids=ids, sort_by=sort_by, descending=order == "desc"
    )
    status = body.get("status")
    values = _metadata(body, "values")
    if status is None and not values:
        return records
    if status is not None and status not in ("idle", "busy", "interrupted", "error"):
        raise ServeRequestError("status", "must be 'idle', 'busy', 'interrupted' or 'error'")
    kept = []
    for r in records:
        state = await server.state(r.thread_id)
        if values and (state is None or any(state.values.get(k) != v for k, v in values.items())):
            continue
        if status is not None and await server.status(r.thread_id, state) != status:
            continue
        kept.append(r)
    return kept


@router.post("/threads/search")
async def search_threads(request: Request) -> Response:
    server = server_of(request)
    body = await read_body(request)
    limit, offset = _int(body, "limit", 10, 1), _int(body, "offset", 0)
    select = body.get("select")
    found = await _matching(server, body)
    page = found[offset : offset + limit]
    headers = {"X-Pagination-Total": str(len(found))}
    if offset + limit < len(found):
        headers["X-Pagination-Next"] = str(offset + limit)
    docs = [await server.thread_doc(r, select if isinstance(select, list) else None) for r in page]
    return json_response(docs, headers=headers)


@router.post("/threads/count")
async def count_threads(request: Request) -> Response:
    server = server_of(request)
    return json_response(len(await _matching(server, await read_body(request))))


@router.get("/threads/{thread_id}")
async def get_thread(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    return json_response(await server.thread_doc(await server.thread_record(thread_id)))


@router.patch("/threads/{thread_id}")
async def patch_thread(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    body = await read_body(request)
    record = await server.thread_record(thread_id)
    await server.log.put_thread(record)  # a store-only thread gets its record now
    updated = await server.log.update_thread(thread_id, _metadata(body), server.clock())
    assert updated is not None
    return json_response(await server.thread_doc(updated))


@router.delete("/threads/{thread_id}")
async def delete_thread(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    await server.thread_record(thread_id)
    for run in await server.log.active_runs(thread_id):
        if not run.done:
            await server.runner.cancel(run.run_id, "interrupt")
            await server.runner.join(run.run_id)
    await server.checkpointer.adelete_thread(thread_id)
    await server.log.delete_thread(thread_id)
    server.notifier.notify(thread_key(thread_id))  # the thread's streams end
    return Response(status_code=204)


@router.post("/threads/{thread_id}/copy")
async def copy(thread_id: str, request: Request) -> Response:
    server = server_of(request)
    source = await server.thread_record(thread_id)
    target = str(uuid.uuid4())
    await copy_thread(server.checkpointer, thread_id, target)
    now = server.clock()
    record, _ = await server.log.put_thread(
        ThreadRecord(thread_id=target, metadata=dict(source.metadata), created_at=now, updated_at=now)
    )
    return json_response(await server.thread_doc(record))


async def _state(server: Server, thread_id: str, checkpoint_id: str | None) -> Response:
    await server.thread_record(thread_id)
    state = await server.state(thread_id, checkpoint_id)
    if state is None:
        if checkpoint_id is not None:
            raise CheckpointNotFoundError(thread_id, checkpoint_id, "")
        return json_response(_empty_state(thread_id))
    return json_response(state_json(state))


def _empty_state(thread_id: str) -> dict[str, Any]:
    """The state of a thread with no checkpoint yet (made, never run)."""
    return {
        "values": {}, "next": [], "tasks": [], "checkpoint": None, "metadata": {}, "created_at": None,
        "parent_checkpoint": None, "interrupts": [],
    }  # fmt: skip


@router.get("/threads/{thread_id}/state")
async def get_state(thread_id: str, request: Request) -> Response:
    return await _state(server_of(request), thread_id, None)


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(thread_id: str, checkpoint_id: str, request: Request) -> Response:
    return await _state(server_of(request), thread_id, checkpoint_id)


@router.post("/threads/{thread_id}/state/checkpoint")
async def get_state_of_checkpoint(thread_id: str, request: Request) -> Response:
    body = await read_body(request)
    checkpoint = body.get("checkpoint")
    cid = checkpoint.get("checkpoint_id") if isinstance(checkpoint, Mapping) else None
    return await _state(server_of(request), thread_id, cid)


@router.patch("/threads/{thread_id}/state")
async def patch_state(thread_id: str, request: Request) -> Response:
    """A checkpoint's metadata edited in place: refused (409), plait never rewrites one."""
    await server_of(request).thread_record(thread_id)
    raise CheckpointMetadataReadOnlyError(thread_id)


@router.post("/threads/{thread_id}/state")
async def update_state(thread_id: str, request: Request) -> Response:
    """``update_state``: fold ``values`` through the reducers as ``as_node`` (a new
    checkpoint), on the head or on ``checkpoint_id`` (a branch)."""
    server = server_of(request)
    body = await read_body(request)
    record = await server.thread_record(thread_id)
    assistant = _graph_of(server, record)
    as_node = body.get("as_node")
    if as_node is not None and not isinstance(as_node, str):
        raise ServeRequestError("as_node", "must be a node name")
    values = body.get("values")
    if isinstance(values, list) and values and isinstance(values[0], dict):
        values = values[0]  # the SDKs send a list for a bulk update of one
    checkpoint = body.get("checkpoint")
    cid = body.get("checkpoint_id") or (checkpoint.get("checkpoint_id") if isinstance(checkpoint, Mapping) else None)
    graph = assistant.graph.bind(checkpointer=server.checkpointer)
    new_id = await graph.aupdate_state(thread_id, values or {}, as_node, checkpoint_id=cid)
    await server.log.put_thread(record)
    await server.log.touch_thread(thread_id, server.clock())
    return json_response(
        {"checkpoint": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": new_id, "checkpoint_map": None}}
    )


def _graph_of(server: Server, record: ThreadRecord) -> Assistant:
    """The assistant whose graph folds an update of the thread: the one its metadata names
    (``graph_id``, set by its first run), or the only one served."""
    name = record.metadata.get("graph_id")
    if isinstance(name, str):
        return server.assistants.find(name)
    served = server.assistants.all()
    if len(served) != 1:
        raise ServeRequestError(
            "thread", "has no graph_id in its metadata and several graphs are served; run it once, or set graph_id"
        )
    return served[0]


@router.post("/threads/{thread_id}/history")
async def history(thread_id: str, request: Request) -> Response:
    body = await read_body(request)
    return await _history(server_of(request), thread_id, body)


@router.get("/threads/{thread_id}/history")
async def history_get(thread_id: str, request: Request) -> Response:
    params = dict(request.query_params)
    body: dict[str, Any] = {"limit": int(params["limit"]) if "limit" in params else 10}
    if "before" in params:
        body["before"] = params["before"]
    return await _history(server_of(request), thread_id, body)


def _checkpoint_of(value: Any) -> str | None:
    """A checkpoint id from what the SDKs send: an id, a checkpoint object, or a config."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        inner = value.get("configurable", value)
        if isinstance(inner, Mapping) and isinstance(inner.get("checkpoint_id"), str):
            return str(inner["checkpoint_id"])
        return None
    raise ServeRequestError("before", "must be a checkpoint id or a config naming one")


async def _history(server: Server, thread_id: str, body: Mapping[str, Any]) -> Response:
    await server.thread_record(thread_id)
    limit = _int(body, "limit", 10, 1)
    before = _checkpoint_of(body.get("before"))
    start = _checkpoint_of(body.get("checkpoint"))
    meta = _metadata(body)
    if start is not None:
        head = await server.checkpointer.aget(thread_id, start)
        if head is None:
            raise CheckpointNotFoundError(thread_id, start, "")
        cps = [head, *await server.checkpointer.ahistory(thread_id, before=start, limit=limit - 1 or 1)]
        cps = [cp for cp in cps[:limit] if holds(cp, meta)]
    else:
        cps = await every_branch(server.checkpointer, thread_id, limit=limit, before=before, metadata=meta)
    return json_response([state_json(ThreadState.of(cp)) for cp in cps])
