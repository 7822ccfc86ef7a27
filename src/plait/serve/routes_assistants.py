"""Assistants (one per served graph) and the server's own endpoints (``/ok``, ``/info``)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import Response

from plait._version import __version__
from plait.graph.draw import draw_json
from plait.serve.kernel import read_body, server_of
from plait.serve.routing import Routes
from plait.serve.wire import json_response

__all__ = ["router"]

router = Routes()


@router.get("/ok")
async def ok() -> Response:
    return json_response({"ok": True})


@router.get("/info")
async def info(request: Request) -> Response:
    server = server_of(request)
    return json_response(
        {
            "version": __version__,
            "server": "plait",
            "langgraph_py_version": None,
            "flags": {"assistants": True, "crons": True, "langsmith": False},
            "store": server.checkpointer.capabilities.kind,
            "metadata": {},
        }
    )


def _found(body: dict[str, Any], request: Request) -> list[dict[str, Any]]:
    graph_id, name, metadata = body.get("graph_id"), body.get("name"), body.get("metadata") or {}
    found: list[dict[str, Any]] = []
    for a in server_of(request).assistants.all():
        doc = a.to_json()
        if graph_id is not None and a.name != graph_id:
            continue
        if name is not None and a.name != name:
            continue
        if isinstance(metadata, dict) and any(doc["metadata"].get(k) != v for k, v in metadata.items()):
            continue
        found.append(doc)
    key = body.get("sort_by") or "created_at"
    if key in ("assistant_id", "graph_id", "name", "created_at", "updated_at"):
        found.sort(key=lambda d: str(d[key]), reverse=(body.get("sort_order") or "asc") == "desc")
    return found


@router.post("/assistants/search")
async def search(request: Request) -> Response:
    body = await read_body(request)
    found = _found(body, request)
    offset, limit = int(body.get("offset") or 0), int(body.get("limit") or 10)
    headers = {"X-Pagination-Total": str(len(found))}
    if offset + limit < len(found):
        headers["X-Pagination-Next"] = str(offset + limit)
    select = body.get("select")
    page = found[offset : offset + limit]
    if isinstance(select, list) and select:
        page = [{k: v for k, v in d.items() if k in select} for d in page]
    return json_response(page, headers=headers)


@router.post("/assistants/count")
async def count(request: Request) -> Response:
    return json_response(len(_found(await read_body(request), request)))


@router.get("/assistants/{assistant_id}")
async def get(assistant_id: str, request: Request) -> Response:
    return json_response(server_of(request).assistants.find(assistant_id).to_json())


@router.get("/assistants/{assistant_id}/graph")
async def graph(assistant_id: str, request: Request) -> Response:
    a = server_of(request).assistants.find(assistant_id)
    return json_response(draw_json(a.graph.spec))


@router.get("/assistants/{assistant_id}/schemas")
async def schemas(assistant_id: str, request: Request) -> Response:
    a = server_of(request).assistants.find(assistant_id)
    channels: dict[str, Any] = {key: {} for key in a.graph.spec.schema.keys}
    state = {"title": a.name, "type": "object", "properties": channels}
    return json_response(
        {
            "graph_id": a.name,
            "input_schema": state,
            "output_schema": state,
            "state_schema": state,
            "config_schema": None,
            "context_schema": None,
        }
    )


@router.get("/assistants/{assistant_id}/subgraphs")
async def subgraphs(assistant_id: str, request: Request) -> Response:
    server_of(request).assistants.find(assistant_id)
    return json_response({})
