"""The memory store's JSON API (``/api/store/``): namespaces as a tree, items listed,
filtered, searched by meaning and paged, one item read, put and deleted; every refusal a 4xx
with plait's message; a store without memory a 404 saying so."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from plait import FileCheckpointer, Store
from plait.checkpoint.base import Checkpointer

from ._memory_support import START, Clock, memory_client
from ._studio_support import write_headers


@pytest.fixture
def client(memory_backend: Checkpointer) -> Iterator[TestClient]:
    with memory_client(memory_backend) as c:
        yield c


def _keys(body: dict[str, object]) -> list[tuple[str, str]]:
    items = body["items"]
    assert isinstance(items, list)
    return [(".".join(i["namespace"]), i["key"]) for i in items]


def test_namespaces_as_a_list_and_a_tree(client: TestClient) -> None:
    body = client.get("/api/store/namespaces").json()
    assert body["namespaces"] == [
        ["docs"],
        ["users", "u1"],
        ["users", "u1", "notes"],
        ["users", "u2"],
        ["users", "u2", "notes"],
    ]
    assert body["next_offset"] is None
    docs, users = body["tree"]
    assert docs == {"label": "docs", "namespace": ["docs"], "holds_items": True, "children": []}
    assert users["holds_items"] is False and [c["label"] for c in users["children"]] == ["u1", "u2"]
    u1 = users["children"][0]
    assert u1["holds_items"] is True and u1["children"][0]["namespace"] == ["users", "u1", "notes"]


def test_namespaces_under_a_prefix_cut_to_a_depth_and_paged(client: TestClient) -> None:
    under = client.get("/api/store/namespaces", params={"prefix": "users.u2"}).json()
    assert under["namespaces"] == [["users", "u2"], ["users", "u2", "notes"]]
    assert [n["label"] for n in under["tree"]] == ["notes"]  # the tree starts under the prefix
    cut = client.get("/api/store/namespaces", params={"prefix": "users", "max_depth": 2}).json()
    assert cut["namespaces"] == [["users", "u1"], ["users", "u2"]]
    assert [n["holds_items"] for n in cut["tree"]] == [None, None]  # cut short: not known
    first = client.get("/api/store/namespaces", params={"limit": 2}).json()
    assert first["namespaces"] == [["docs"], ["users", "u1"]] and first["next_offset"] == 2
    rest = client.get("/api/store/namespaces", params={"limit": 2, "offset": 4}).json()
    assert rest["namespaces"] == [["users", "u2", "notes"]] and rest["next_offset"] is None
    assert client.get("/api/store/namespaces", params={"max_depth": 0}).status_code == 422


def test_items_under_a_namespace_newest_first_and_paged(client: TestClient) -> None:
    every = client.get("/api/store/items/search").json()
    assert _keys(every) == [
        ("users.u2.notes", "walk"),
        ("users.u2", "profile"),
        ("users.u1", "profile"),
        ("users.u1.notes", "coffee"),
        ("users.u1.notes", "tea"),
        ("docs", "guide"),
    ]
    assert every["has_index"] is False and all(i["score"] is None for i in every["items"])
    u1 = client.get("/api/store/items/search", params={"namespace": "users.u1"}).json()
    assert _keys(u1) == [("users.u1", "profile"), ("users.u1.notes", "coffee"), ("users.u1.notes", "tea")]
    page = client.get("/api/store/items/search", params={"limit": 4}).json()
    assert len(page["items"]) == 4 and page["next_offset"] == 4
    rest = client.get("/api/store/items/search", params={"limit": 4, "offset": 4}).json()
    assert _keys(rest) == [("users.u1.notes", "tea"), ("docs", "guide")] and rest["next_offset"] is None


def test_a_filter_keeps_the_matching_values(client: TestClient) -> None:
    def found(filter: str, namespace: str = "") -> list[str]:
        r = client.get("/api/store/items/search", params={"namespace": namespace, "filter": filter})
        assert r.status_code == 200, r.text
        return [k for _, k in _keys(r.json())]

    assert found('{"kind": "note"}') == ["walk", "coffee", "tea"]
    assert found('{"kind": "note"}', "users.u1") == ["coffee", "tea"]
    assert found('{"n": {"$gte": 2}}') == ["walk", "coffee"]
    assert found('{"city.name": "Oslo"}') == ["profile"]
    assert found('{"kind": "note", "n": {"$ne": 1}}') == ["walk", "coffee"]
    assert found("{}") == ["walk", "profile", "profile", "coffee", "tea", "guide"]


def test_bad_searches_are_400s_with_the_stores_message(client: TestClient) -> None:
    r = client.get("/api/store/items/search", params={"filter": "{kind"})
    assert r.status_code == 400 and r.json()["error"] == "MemoryFilterError" and "not JSON" in r.json()["message"]
    r = client.get("/api/store/items/search", params={"filter": "[1]"})
    assert r.status_code == 400 and "not a JSON object" in r.json()["message"]
    r = client.get("/api/store/items/search", params={"filter": '{"n": {"$near": 1}}'})
    assert r.status_code == 400 and r.json()["error"] == "MemoryFilterError" and "$near" in r.json()["message"]
    r = client.get("/api/store/items/search", params={"query": "tea"})
    assert r.status_code == 400 and r.json()["error"] == "EmbeddingError" and "index" in r.json()["message"]
    r = client.get("/api/store/items/search", params={"namespace": "users..u1"})
    assert r.status_code == 400 and r.json()["error"] == "InvalidNamespaceError"
    assert client.get("/api/store/items/search", params={"limit": 0}).status_code == 422


def test_one_item_with_its_times(client: TestClient) -> None:
    item = client.get("/api/store/items", params={"namespace": "users.u1.notes", "key": "coffee"}).json()
    assert item == {
        "namespace": ["users", "u1", "notes"],
        "key": "coffee",
        "value": {"kind": "note", "text": "no coffee after noon", "n": 2},
        "created_at": "2027-01-15T08:00:02.000000+00:00",
        "updated_at": "2027-01-15T08:00:02.000000+00:00",
    }
    r = client.get("/api/store/items", params={"namespace": "users.u1.notes", "key": "cocoa"})
    assert r.status_code == 404 and "'cocoa'" in r.json()["message"] and "users.u1.notes" in r.json()["message"]
    r = client.get("/api/store/items", params={"namespace": "", "key": "guide"})
    assert r.status_code == 400 and r.json()["error"] == "InvalidNamespaceError"


def test_put_and_delete_are_writes_guarded_like_every_other(client: TestClient) -> None:
    body = {"namespace": ["users", "u3"], "key": "profile", "value": {"name": "Cy"}}
    assert client.put("/api/store/items", json=body).status_code == 403
    r = client.put("/api/store/items", json=body, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "Origin" in r.json()["message"]
    gone = {"namespace": "docs", "key": "guide"}
    assert client.delete("/api/store/items", params=gone).status_code == 403
    assert client.get("/api/store/items", params=gone).status_code == 200  # still there
    assert client.get("/api/store/items", params={"namespace": "users.u3", "key": "profile"}).status_code == 404


def test_put_adds_and_replaces_delete_removes(client: TestClient) -> None:
    headers = write_headers(client)
    put = client.put(
        "/api/store/items",
        json={"namespace": ["users", "u3"], "key": "profile", "value": {"name": "Cy"}},
        headers=headers,
    )
    assert put.status_code == 200 and put.json()["value"] == {"name": "Cy"}
    again = client.put(
        "/api/store/items",
        json={"namespace": ["users", "u3"], "key": "profile", "value": {"name": "Cyd"}},
        headers=headers,
    ).json()
    assert again["value"] == {"name": "Cyd"} and again["created_at"] == put.json()["created_at"]
    assert again["updated_at"] >= put.json()["updated_at"]
    assert ["users", "u3"] in client.get("/api/store/namespaces").json()["namespaces"]

    r = client.delete("/api/store/items", params={"namespace": "users.u3", "key": "profile"}, headers=headers)
    assert r.json() == {"namespace": ["users", "u3"], "key": "profile", "deleted": True}
    assert client.get("/api/store/items", params={"namespace": "users.u3", "key": "profile"}).status_code == 404
    assert ["users", "u3"] not in client.get("/api/store/namespaces").json()["namespaces"]
    r = client.delete("/api/store/items", params={"namespace": "users.u3", "key": "profile"}, headers=headers)
    assert r.status_code == 404


def test_a_put_the_store_refuses_is_a_4xx(client: TestClient) -> None:
    headers = write_headers(client)
    r = client.put("/api/store/items", json={"namespace": ["a.b"], "key": "k", "value": {}}, headers=headers)
    assert r.status_code == 400 and r.json()["error"] == "InvalidNamespaceError"
    r = client.put("/api/store/items", json={"namespace": ["a"], "key": "k", "value": [1]}, headers=headers)
    assert r.status_code == 422
    r = client.put("/api/store/items", json={"namespace": ["a"], "key": "k", "value": {}, "ttl": -1}, headers=headers)
    assert r.status_code == 400 and r.json()["error"] == "InvalidMemoryError" and "ttl" in r.json()["message"]
    for not_minutes in (True, "5"):  # a bool or a text is no number, whatever lax parsing makes of it
        body: dict[str, object] = {"namespace": ["a"], "key": "k", "value": {}, "ttl": not_minutes}
        assert client.put("/api/store/items", json=body, headers=headers).status_code == 422
    assert client.get("/api/store/items", params={"namespace": "a", "key": "k"}).status_code == 404


def test_the_studio_only_looks_its_reads_do_not_extend_a_life(memory_backend: Checkpointer) -> None:
    """A store that refreshes on read: the Studio's reads leave the expiry where it was."""
    clock = Clock()
    store = Store(memory_backend, ttl={"default_ttl": 1, "refresh_on_read": True}, clock=clock)
    store.put(("s",), "k", {"v": 1})
    item = {"namespace": "s", "key": "k"}
    with memory_client(memory_backend, store) as c:
        clock.now = START + 50
        assert c.get("/api/store/items", params=item).status_code == 200
        assert len(c.get("/api/store/items/search", params={"namespace": "s"}).json()["items"]) == 1
        clock.now = START + 70  # 60 s after the put: gone, though read 20 s ago
        assert c.get("/api/store/items", params=item).status_code == 404
        assert c.get("/api/store/items/search", params={"namespace": "s"}).json()["items"] == []
        assert ["s"] not in c.get("/api/store/namespaces").json()["namespaces"]
    assert store.get(("s",), "k") is None


def _embed(texts: list[str]) -> list[list[float]]:
    """Letters counted: texts that share words point the same way (a real, if simple, embedding)."""
    out = []
    for text in texts:
        counts = [float(text.lower().count(ch)) for ch in "abcdefghijklmnopqrstuvwxyz"]
        norm = math.sqrt(sum(c * c for c in counts)) or 1.0
        out.append([c / norm for c in counts])
    return out


def test_a_store_with_an_index_searches_by_meaning(memory_backend: Checkpointer) -> None:
    store = Store(memory_backend, index={"dims": 26, "embed": _embed, "fields": ["text"]})
    store.put(("n",), "tea", {"text": "green tea"})
    store.put(("n",), "zzz", {"text": "xyzzy quux"})
    store.put(("n",), "bare", {"other": 1})  # no text: no vector
    with memory_client(memory_backend, store) as c:
        body = c.get("/api/store/items/search", params={"query": "tea green"}).json()  # ITEMS have no vectors
        assert body["has_index"] is True
        assert [i["key"] for i in body["items"]] == ["tea", "zzz"]
        assert body["items"][0]["score"] > body["items"][1]["score"]
        assert c.get("/memory", params={"query": "tea"}).text.count('name="query"') == 1


def test_a_store_without_memory_is_a_404_saying_so(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path / "files")
    with memory_client(cp) as c:
        for path, params in [
            ("/api/store/namespaces", {}),
            ("/api/store/items/search", {}),
            ("/api/store/items", {"namespace": "a", "key": "k"}),
        ]:
            r = c.get(path, params=params)
            assert r.status_code == 404 and r.json()["error"] == "StoreUnsupportedError", path
            assert "keeps no memory store" in r.json()["message"]
        r = c.delete("/api/store/items", params={"namespace": "a", "key": "k"}, headers=write_headers(c))
        assert r.status_code == 404 and r.json()["error"] == "StoreUnsupportedError"
