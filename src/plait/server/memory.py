"""The Studio over the memory store (:class:`plait.Store`): the JSON API under
``/api/store/`` and what the Memory page shares with it.

The store is the one :func:`~plait.server.create_app` was given, else the checkpointer's own
(``checkpointer.store``); a checkpointer that keeps no memory (the file backend) raises
:class:`~plait.errors.StoreUnsupportedError`, a 404 here and a notice on the page.

A namespace travels in a URL as its labels joined by ``.`` (``users.u42``; ``""`` is the
root): a label can hold no ``.``, so the text names one namespace only. The Studio only looks:
its reads never extend an item's time to live (``refresh_ttl=False``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from plait.errors import MemoryFilterError
from plait.server.http import StudioRefusal, json_response
from plait.server.studio import check_write, studio_of
from plait.store import Item, SearchItem, Store

__all__ = [
    "NamespaceNode",
    "find_item",
    "item_json",
    "namespace_of",
    "namespace_text",
    "namespace_tree",
    "parse_filter_text",
    "preview",
    "router",
    "search_page",
    "store_of",
]

PREVIEW = 90
"""Characters of a value shown in a list."""


def store_of(request: Request) -> Store:
    """The memory store the Studio shows.

    Raises:
        StoreUnsupportedError: the Studio's checkpointer keeps no memory and it was given no store.
    """
    studio = studio_of(request)
    return studio.memory if studio.memory is not None else studio.checkpointer.store


def namespace_of(text: str | None) -> tuple[str, ...]:
    """A namespace from its URL form (``users.u42``); ``""`` is the root, ``()``. The store
    checks the labels (an empty one, ``a..b``, is refused by it with its own message)."""
    return tuple(text.split(".")) if text else ()


def namespace_text(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def parse_filter_text(text: str | None) -> dict[str, Any] | None:
    """A search filter from its JSON text.

    Raises:
        MemoryFilterError: not JSON, or not a JSON object.
    """
    if not text or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise MemoryFilterError(text, f"it is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise MemoryFilterError(data, "it is not a JSON object")
    return data


def _when(item: Item) -> tuple[str, str]:
    return item.created_at.isoformat(timespec="microseconds"), item.updated_at.isoformat(timespec="microseconds")


def item_json(item: Item) -> dict[str, Any]:
    """An item as the API gives it (times ISO 8601 UTC with microseconds, as every Studio
    time); a search's items carry their ``score`` (null without a query)."""
    created, updated = _when(item)
    out: dict[str, Any] = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": created,
        "updated_at": updated,
    }
    if isinstance(item, SearchItem):
        out["score"] = item.score
    return out


def preview(value: Any, width: int = PREVIEW) -> str:
    """A value's compact JSON, cut to ``width`` characters (the list's column)."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class NamespaceNode:
    """One label of the namespace tree: its full namespace, whether items sit right in it
    (not only under it; None: not known, the listing was cut to ``max_depth``), and the
    labels under it."""

    label: str
    namespace: tuple[str, ...]
    holds_items: bool | None = False
    children: dict[str, NamespaceNode] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "namespace": list(self.namespace),
            "holds_items": self.holds_items,
            "children": [c.to_json() for c in self.children.values()],
        }


def namespace_tree(
    namespaces: Sequence[tuple[str, ...]], prefix: tuple[str, ...] = (), *, cut: bool = False
) -> list[NamespaceNode]:
    """The namespaces ``list_namespaces`` gave (each holds items) as a tree under ``prefix``,
    in their order. ``cut``: they were cut to ``max_depth`` labels, so whether a node holds
    items itself is not known."""
    top: dict[str, NamespaceNode] = {}
    for ns in namespaces:
        level, path, node = top, prefix, None
        for label in ns[len(prefix) :]:
            path = (*path, label)
            node = level.get(label)
            if node is None:
                node = level[label] = NamespaceNode(label, path, None if cut else False)
            level = node.children
        if node is not None and not cut:
            node.holds_items = True
    return list(top.values())


async def search_page(
    store: Store,
    prefix: tuple[str, ...],
    *,
    filter: dict[str, Any] | None,
    query: str | None,
    limit: int,
    offset: int,
) -> tuple[list[SearchItem], int | None]:
    """One page of the items under ``prefix`` (newest first, or closest to ``query`` first),
    and the offset of the next page (None: this is the last)."""
    found = await store.asearch(
        prefix, filter=filter, query=query or None, limit=limit + 1, offset=offset, refresh_ttl=False
    )
    return found[:limit], offset + limit if len(found) > limit else None


async def find_item(store: Store, namespace: tuple[str, ...], key: str) -> Item:
    """The item, read without extending its life.

    Raises:
        StudioRefusal: (404) there is none (or it expired).
    """
    item = await store.aget(namespace, key, refresh_ttl=False)
    if item is None:
        raise StudioRefusal(
            404,
            f"no item {key!r} in namespace {namespace_text(namespace)!r} (deleted, expired, or never put): "
            f"GET /api/store/items/search?namespace={namespace_text(namespace)} lists what is there",
        )
    return item


# -- the JSON API ------------------------------------------------------------------------------

router = APIRouter(prefix="/api/store")

NamespaceQ = Annotated[str, Query(description='The namespace, its labels joined by "." (users.u42).')]
PrefixQ = Annotated[str, Query(description='A namespace prefix, labels joined by "." ("": every namespace).')]


@router.get("/namespaces", summary="The memory store's namespaces, as a list and as a tree")
async def list_namespaces(
    request: Request,
    prefix: PrefixQ = "",
    max_depth: Annotated[int | None, Query(ge=1, le=100, description="Cut each namespace to this many labels.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    store = store_of(request)
    start = namespace_of(prefix)
    found = await store.alist_namespaces(prefix=start, max_depth=max_depth, limit=limit + 1, offset=offset)
    page = found[:limit]
    tree = namespace_tree(page, start, cut=max_depth is not None)
    return json_response(
        {
            "namespaces": [list(ns) for ns in page],
            "tree": [n.to_json() for n in tree],
            "next_offset": offset + limit if len(found) > limit else None,
        }
    )


@router.get("/items", summary="One item of the memory store (404: there is none)")
async def get_item(request: Request, namespace: NamespaceQ, key: Annotated[str, Query(min_length=1)]) -> Response:
    return json_response(item_json(await find_item(store_of(request), namespace_of(namespace), key)))


@router.get("/items/search", summary="The items under a namespace prefix: newest first, filtered, paged")
async def search_items(
    request: Request,
    namespace: PrefixQ = "",
    filter: Annotated[
        str | None, Query(description='A JSON object the values must match: {"kind": "note", "n": {"$gt": 2}}.')
    ] = None,
    query: Annotated[
        str | None, Query(description="Rank by meaning (needs a store with an index; see has_index).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    store = store_of(request)
    items, more = await search_page(
        store, namespace_of(namespace), filter=parse_filter_text(filter), query=query, limit=limit, offset=offset
    )
    return json_response(
        {"items": [item_json(i) for i in items], "next_offset": more, "has_index": store.index is not None}
    )


class PutBody(BaseModel):
    namespace: list[str] = Field(description='The namespace\'s labels: ["users", "u42"].')
    key: str = Field(min_length=1)
    value: dict[str, Any] = Field(description="A JSON object.")
    # strict: JSON's true is not a number of minutes (lax mode would read it as 1.0)
    ttl: float | None = Field(None, strict=True, description="Minutes it lives (null: the store's default).")


@router.put("/items", dependencies=[Depends(check_write)], summary="Put an item (a new one, or replacing one)")
async def put_item(request: Request, body: PutBody) -> Response:
    store = store_of(request)
    ns = tuple(body.namespace)
    if body.ttl is None:
        await store.aput(ns, body.key, body.value)
    else:
        await store.aput(ns, body.key, body.value, ttl=body.ttl)
    return json_response(item_json(await find_item(store, ns, body.key)))


@router.delete("/items", dependencies=[Depends(check_write)], summary="Delete an item (404: there is none)")
async def delete_item(request: Request, namespace: NamespaceQ, key: Annotated[str, Query(min_length=1)]) -> Response:
    store = store_of(request)
    item = await find_item(store, namespace_of(namespace), key)
    await store.adelete(item.namespace, item.key)
    return json_response({"namespace": list(item.namespace), "key": item.key, "deleted": True})
