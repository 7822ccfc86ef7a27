"""The memory store over HTTP, as the LangGraph SDKs' ``client.store`` calls it: put, get and
delete an item, search a namespace prefix, list namespaces.

The wire format is LangGraph's: a namespace is a list of labels in a body, and the labels
joined with ``.`` in ``GET /store/items``'s query (so a label holds no ``.``, which the store
refuses anyway); an item is ``{namespace, key, value, created_at, updated_at}`` with ISO
times, a search's items add ``score``; a missing item is ``null`` with 200, as LangGraph's
server answers (the Python SDK returns None, the JS SDK null). A put's ``ttl`` given as
``null`` means never; left out, the store's default. Refusals are the store's own errors
(a bad namespace, value or filter: 422; a server whose checkpointer keeps no memory: 400,
not a 5xx, which the JS SDK would retry).
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import Response

from plait.errors import ServeRequestError
from plait.serve.kernel import read_body, server_of
from plait.serve.memory import refusal
from plait.serve.routing import Routes
from plait.serve.wire import json_response
from plait.store import NOT_GIVEN, Store

__all__ = ["router"]

router = Routes()

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _store(request: Request) -> Store:
    """The served memory store.

    Raises:
        StoreUnsupportedError: the server's checkpointer keeps none (the file store).
    """
    server = server_of(request)
    if server.memory is None:
        raise refusal(server.checkpointer)
    return server.memory


def _labels(body: dict[str, Any], name: str, *, default: list[str] | None = None) -> list[str] | None:
    """A namespace in a body: a list of labels (the store checks each), or ``default`` when
    the key is missing or null."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, list):
        raise ServeRequestError(name, f'must be a list of labels, like ["users", "u42"]; got {type(value).__name__}')
    return value


def _flag(value: Any, name: str) -> bool | None:
    """A body's ``true``/``false``/null, or a query's ``true``/``false`` text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ServeRequestError(name, f"must be true or false; got {value!r}")


def _count(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ServeRequestError(name, f"must be a whole number; got {value!r}")
    return value


@router.put("/store/items")
async def put_item(request: Request) -> Response:
    body = await read_body(request)
    store = _store(request)
    await store.aput(
        _labels(body, "namespace", default=[]) or [],
        body.get("key"),  # type: ignore[arg-type]  # the store checks it (a key is text)
        body.get("value"),  # the store checks it (a JSON object; null deletes)
        index=body.get("index"),
        ttl=body.get("ttl", NOT_GIVEN),  # null: never expires; left out: the store's default
    )
    return Response(status_code=204)


@router.get("/store/items")
async def get_item(request: Request) -> Response:
    query = request.query_params
    key = query.get("key")
    if key is None:
        raise ServeRequestError("key", "is required: GET /store/items?namespace=users.u42&key=KEY")
    store = _store(request)
    text = query.get("namespace") or ""
    namespace = text.split(".") if text else []
    item = await store.aget(namespace, key, refresh_ttl=_flag(query.get("refresh_ttl"), "refresh_ttl"))
    return json_response(None if item is None else item.dict())


@router.delete("/store/items")
async def delete_item(request: Request) -> Response:
    body = await read_body(request)
    store = _store(request)
    await store.adelete(_labels(body, "namespace", default=[]) or [], body.get("key"))  # type: ignore[arg-type]
    return Response(status_code=204)


@router.post("/store/items/search")
async def search_items(request: Request) -> Response:
    body = await read_body(request)
    store = _store(request)
    query = body.get("query")
    if query is not None and not isinstance(query, str):
        raise ServeRequestError("query", "must be the text to search for")
    found = await store.asearch(
        _labels(body, "namespace_prefix", default=[]) or [],
        query=query,
        filter=body.get("filter"),
        limit=_count(body, "limit", 10),
        offset=_count(body, "offset", 0),
        refresh_ttl=_flag(body.get("refresh_ttl"), "refresh_ttl"),
    )
    return json_response({"items": [item.dict() for item in found]})


@router.post("/store/namespaces")
async def list_namespaces(request: Request) -> Response:
    body = await read_body(request)
    store = _store(request)
    max_depth = body.get("max_depth")
    found = await store.alist_namespaces(
        prefix=_labels(body, "prefix"),
        suffix=_labels(body, "suffix"),
        max_depth=None if max_depth is None else _count(body, "max_depth", 0),
        limit=_count(body, "limit", 100),
        offset=_count(body, "offset", 0),
    )
    return json_response({"namespaces": [list(ns) for ns in found]})
