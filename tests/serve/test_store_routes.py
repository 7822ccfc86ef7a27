"""``plait serve``'s memory store (``/store/...``) driven by the unmodified ``langgraph-sdk``
Python client: put, get, search, list namespaces and delete as ``client.store`` calls them;
the served graphs' ``ctx.store`` writing to the same store a client reads; the time to live;
a semantic index from the server's config; and every refusal as a 4xx (a 400 from a server
whose checkpointer keeps no memory, not a 5xx the JS SDK would retry)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import BadRequestError, UnprocessableEntityError

from plait import END, START, Graph, MemoryCheckpointer, NodeContext, Store
from plait.checkpoint.address import open as open_store
from plait.checkpoint.base import Checkpointer
from plait.graph.compiled import CompiledGraph
from plait.serve.app import ServeConfig

from ._serve_support import APPS, served

VOCABULARY = ("cat", "dog", "fish", "bird")


def embed(texts: list[str]) -> list[list[float]]:
    """A vector per text: how often it names each animal, and a constant (never all zero)."""
    return [[float(t.lower().count(word)) for word in VOCABULARY] + [0.1] for t in texts]


class Note(TypedDict, total=False):
    user: str
    text: str


def _remember(state: Any, ctx: NodeContext) -> dict[str, Any]:
    """Saves the thread's note under the user's namespace and answers with what it found there."""
    ctx.store.put(("users", state["user"]), str(ctx.thread_id), {"text": state["text"]})
    seen = sorted(i.value["text"] for i in ctx.store.search(("users", state["user"])))
    return {"text": " | ".join(seen)}


def remember_graph() -> CompiledGraph:
    g = Graph(Note).add_node("remember", _remember)
    g.add_edge(START, "remember").add_edge("remember", END)
    return g.compile(name="remember", store=Store())  # its own store: the server gives it the served one


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """A store that keeps memory: memory, a SQLite file, a PostgreSQL schema of its own."""
    if request.param == "memory":
        cp: Checkpointer = MemoryCheckpointer()
    elif request.param == "sqlite":
        cp = open_store(str(tmp_path / "serve.db"))
    else:
        cp = open_store(request.getfixturevalue("postgres_dsn"), schema=request.getfixturevalue("postgres_schema"))
    try:
        yield cp
    finally:
        cp.close()


def _config(cp: Checkpointer, **store: Any) -> ServeConfig:
    return ServeConfig(workers=1 if cp.capabilities.kind == "postgres" else 0, studio=False, store=store or None)


@pytest.fixture
def url(checkpointer: Checkpointer) -> Iterator[str]:
    with served(checkpointer, {"remember": remember_graph()}, config=_config(checkpointer)) as base:
        yield base


@pytest.fixture
def client(url: str) -> Iterator[Any]:
    with get_sync_client(url=url, api_key=None) as c:
        yield c


def test_an_item_is_put_read_overwritten_and_deleted(client: Any) -> None:
    assert client.store.put_item(["users", "u1"], "pref", {"color": "blue"}) is None
    first = client.store.get_item(["users", "u1"], "pref")
    assert (first["namespace"], first["key"], first["value"]) == (["users", "u1"], "pref", {"color": "blue"})
    assert first["created_at"] == first["updated_at"] and first["created_at"].endswith("+00:00")
    client.store.put_item(["users", "u1"], "pref", {"color": "green", "size": [1, 2]})
    second = client.store.get_item(["users", "u1"], "pref", refresh_ttl=False)
    assert second["value"] == {"color": "green", "size": [1, 2]}
    assert second["created_at"] == first["created_at"] and second["updated_at"] > first["updated_at"]
    assert client.store.get_item(["users", "u2"], "pref") is None  # LangGraph's answer: null, 200
    client.store.delete_item(["users", "u1"], "pref")
    assert client.store.get_item(["users", "u1"], "pref") is None
    client.store.delete_item(["users", "u1"], "pref")  # deleting nothing is no error


def test_search_filters_and_pages_the_newest_first(client: Any) -> None:
    for i, city in enumerate(["Oslo", "Rome", "Oslo", "Lima"]):
        client.store.put_item(["people", f"team{i % 2}"], f"p{i}", {"n": i, "profile": {"city": city}})
    client.store.put_item(["other"], "x", {"n": 9})
    found = client.store.search_items(["people"])["items"]
    assert [i["key"] for i in found] == ["p3", "p2", "p1", "p0"]
    assert all(i["score"] is None and i["namespace"][0] == "people" for i in found)
    oslo = client.store.search_items(["people"], filter={"profile.city": "Oslo"})["items"]
    assert [i["key"] for i in oslo] == ["p2", "p0"]
    big = client.store.search_items([], filter={"n": {"$gte": 2}}, limit=2, offset=1)["items"]
    assert [i["key"] for i in big] == ["p3", "p2"]  # after x (n=9), the newest
    assert [i["key"] for i in client.store.search_items(["people", "team1"])["items"]] == ["p3", "p1"]


def test_namespaces_are_listed_by_prefix_suffix_and_depth(client: Any) -> None:
    for ns in (["a", "b", "c"], ["a", "b", "d"], ["a", "x"], ["z", "b", "c"]):
        client.store.put_item(ns, "k", {"v": 1})
    every = client.store.list_namespaces()["namespaces"]
    assert every == [["a", "b", "c"], ["a", "b", "d"], ["a", "x"], ["z", "b", "c"]]
    assert client.store.list_namespaces(prefix=["a", "b"])["namespaces"] == [["a", "b", "c"], ["a", "b", "d"]]
    assert client.store.list_namespaces(suffix=["b", "c"])["namespaces"] == [["a", "b", "c"], ["z", "b", "c"]]
    assert client.store.list_namespaces(max_depth=1)["namespaces"] == [["a"], ["z"]]
    assert client.store.list_namespaces(limit=1, offset=2)["namespaces"] == [["a", "x"]]


def test_a_served_graphs_ctx_store_writes_what_the_client_reads(client: Any) -> None:
    client.store.put_item(["users", "ada"], "from-client", {"text": "likes cats"})
    thread = client.threads.create()["thread_id"]
    out = client.runs.wait(thread, "remember", input={"user": "ada", "text": "has a dog"})
    assert out["text"] == "has a dog | likes cats"  # the node read the client's item and its own
    item = client.store.get_item(["users", "ada"], thread)
    assert item is not None and item["value"] == {"text": "has a dog"}
    assert client.store.list_namespaces(prefix=["users"])["namespaces"] == [["users", "ada"]]


def test_an_item_lives_its_ttl_and_a_null_ttl_is_forever(checkpointer: Checkpointer) -> None:
    config = _config(checkpointer, ttl={"default_ttl": 5, "refresh_on_read": False})
    with served(checkpointer, {"remember": remember_graph()}, config=config) as base, get_sync_client(url=base) as c:
        memory = APPS[base].state.serve.memory
        c.store.put_item(["t"], "short", {"v": 1}, ttl=1)
        c.store.put_item(["t"], "default", {"v": 2})
        httpx.put(f"{base}/store/items", json={"namespace": ["t"], "key": "forever", "value": {"v": 3}, "ttl": None})
        now = time.time()
        memory.clock = lambda: now + 2 * 60  # two minutes on: past one, not five
        assert c.store.get_item(["t"], "short") is None
        assert [i["key"] for i in c.store.search_items(["t"])["items"]] == ["forever", "default"]
        memory.clock = lambda: now + 10 * 60
        assert [i["key"] for i in c.store.search_items(["t"])["items"]] == ["forever"]
        assert c.store.list_namespaces()["namespaces"] == [["t"]]


def test_the_configured_index_ranks_a_query_by_meaning(checkpointer: Checkpointer) -> None:
    config = _config(checkpointer, index={"dims": 5, "embed": embed, "fields": ["text"]})
    with served(checkpointer, {"remember": remember_graph()}, config=config) as base, get_sync_client(url=base) as c:
        c.store.put_item(["docs"], "pets", {"text": "a cat and a dog"})
        c.store.put_item(["docs"], "cats", {"text": "cat cat cat"})
        c.store.put_item(["docs"], "sea", {"text": "fish"})
        c.store.put_item(["docs"], "unindexed", {"text": "cat"}, index=False)
        found: list[Any] = c.store.search_items(["docs"], query="cat")["items"]
        assert [i["key"] for i in found] == ["cats", "pets", "sea"]
        assert found[0]["score"] > found[1]["score"] > found[2]["score"]
        thread = c.threads.create()["thread_id"]
        c.runs.wait(thread, "remember", input={"user": "bo", "text": "my bird"})  # the node's put is embedded too
        assert c.store.search_items(["users"], query="bird")["items"][0]["key"] == thread


def test_refusals_are_4xx_with_the_stores_reason(client: Any, url: str) -> None:
    def refused(method: str, path: str, **kw: Any) -> tuple[int, str]:
        reply = httpx.request(method, f"{url}{path}", **kw)
        return reply.status_code, str(reply.json()["message"])

    # the SDK refuses a "." in a label itself; a raw request gets the store's reason
    assert refused("PUT", "/store/items", json={"namespace": ["a.b"], "key": "k", "value": {}}) == (
        422,
        "namespace ['a.b'] cannot be used: label 'a.b' holds a \".\" (stores join labels with it). A namespace is "
        'a tuple of non-empty labels such as ("users", "u42", "memories"); a label holds no "." and no NUL character.',
    )
    with pytest.raises(UnprocessableEntityError, match="it is empty"):
        client.store.put_item([], "k", {"v": 1})
    with pytest.raises(UnprocessableEntityError, match="a value is a JSON object"):
        client.store.put_item(["a"], "k", [1, 2])
    with pytest.raises(UnprocessableEntityError, match=r"\$near"):
        client.store.search_items(["a"], filter={"v": {"$near": 1}})
    with pytest.raises(UnprocessableEntityError, match="ttl=-1"):
        client.store.put_item(["a"], "k", {"v": 1}, ttl=-1)
    with pytest.raises(BadRequestError, match="needs an index"):
        client.store.search_items(["a"], query="anything")
    assert refused("GET", "/store/items", params={"namespace": "a"})[0] == 422  # no key
    assert refused("GET", "/store/items", params={"namespace": "a", "key": "k", "refresh_ttl": "maybe"}) == (
        422,
        "refresh_ttl: must be true or false; got 'maybe'",
    )
    assert refused("POST", "/store/items/search", json={"namespace_prefix": "a"})[0] == 422
    assert refused("POST", "/store/namespaces", json={"limit": "ten"}) == (
        422,
        "limit: must be a whole number; got 'ten'",
    )
    assert client.store.search_items(["a"])["items"] == []  # nothing refused was stored


def test_a_server_over_a_file_store_refuses_the_store_with_why(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path / 'files'}")
    try:
        with served(store, {"remember": remember_graph()}) as base, get_sync_client(url=base) as c:
            with pytest.raises(BadRequestError) as put:
                c.store.put_item(["a"], "k", {"v": 1})
            message = str(put.value)
            assert "keeps no memory store" in message and "plait serve --db app.db" in message
            reply = httpx.get(f"{base}/store/items", params={"namespace": "a", "key": "k"})
            assert reply.status_code == 400 and reply.json()["error"] == "StoreUnsupportedError"
    finally:
        store.close()


def test_the_server_sweeps_expired_items_from_its_start(checkpointer: Checkpointer) -> None:
    """The server's own sweeper (its in-process worker's, on PostgreSQL) deletes what expired,
    first at start, then every ``ttl.sweep_interval_minutes``."""
    checkpointer.setup()
    an_hour_ago = Store(checkpointer, clock=lambda: time.time() - 3600)
    an_hour_ago.put(("old",), "k", {"v": 1}, ttl=1)  # expired 59 minutes ago
    checkpointer.store.put(("kept",), "k", {"v": 2})
    config = _config(checkpointer, ttl={"sweep_interval_minutes": 5})
    with served(checkpointer, {"remember": remember_graph()}, config=config) as base:
        app = APPS[base]
        if checkpointer.capabilities.kind == "postgres":
            assert app.state.memory_sweeper is None  # the run queue's workers sweep the database
            sweeper = app.state.serve.runner.workers[0][0].memory_sweeper
        else:
            sweeper = app.state.memory_sweeper
        assert sweeper.interval == 5 * 60
        deadline = time.monotonic() + 30
        while sweeper.sweeps < 1:
            assert time.monotonic() < deadline, "the server never swept"
            time.sleep(0.01)
        assert (sweeper.swept, sweeper.failures) == (1, 0)
        with get_sync_client(url=base) as c:
            assert c.store.list_namespaces()["namespaces"] == [["kept"]]
    assert checkpointer.store.sweep() == 0  # nothing expired was left
