"""The Memory page without JavaScript: the namespace tree, the items under the selected
namespace, one item's value and times, a filtered search, and the delete and put forms
(each redirecting back with a confirmation); a store without memory says so."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from plait import FileCheckpointer
from plait.checkpoint.base import Checkpointer
from plait.server.pages import MEMORY_PAGE

from ._memory_support import memory_client
from ._studio_support import MOUNT, mounted, write_headers


@pytest.fixture
def client(memory_backend: Checkpointer) -> Iterator[TestClient]:
    with memory_client(memory_backend) as c:
        yield c


def _rows(page: str) -> list[str]:
    """The listed items, as NAMESPACE/KEY."""
    return [f"{ns}/{key}" for key, ns in re.findall(r'<tr data-key="([^"]*)" data-ns="([^"]*)"', page)]


def _post(c: TestClient, path: str, data: dict[str, str]) -> tuple[int, str]:
    r = c.post(path, data=data, headers=write_headers(c), follow_redirects=False)
    if r.status_code != 303:
        return r.status_code, r.text
    page = c.get(r.headers["location"])
    return page.status_code, page.text


def test_the_navigation_links_the_memory_page(client: TestClient) -> None:
    assert '<a href="/memory">Memory</a>' in client.get("/").text


def test_the_tree_the_items_under_a_namespace_and_one_item(client: TestClient) -> None:
    page = client.get("/memory").text
    assert re.findall(r'<li data-ns="([^"]+)"', page) == [
        "docs",
        "users",
        "users.u1",
        "users.u1.notes",
        "users.u2",
        "users.u2.notes",
    ]
    assert "<details open>" not in page  # nothing selected: the tree is folded
    assert _rows(page) == [
        "users.u2.notes/walk",
        "users.u2/profile",
        "users.u1/profile",
        "users.u1.notes/coffee",
        "users.u1.notes/tea",
        "docs/guide",
    ]

    page = client.get("/memory", params={"namespace": "users.u1"}).text
    assert _rows(page) == ["users.u1/profile", "users.u1.notes/coffee", "users.u1.notes/tea"]
    assert page.count("<details open>") == 2  # users and u1: the path to the selection
    assert '<a href="/memory?namespace=users.u1" aria-current="true">u1</a>' in page
    assert "&#34;kind&#34;: &#34;profile&#34;" in page  # the value's preview
    assert 'id="item"' not in page

    page = client.get("/memory", params={"namespace": "users.u1", "item_ns": "users.u1.notes", "key": "coffee"}).text
    item = page[page.index('id="item"') :]
    assert '<span class="item-key">coffee</span>' in item and "<code>users.u1.notes</code>" in item
    assert '<time id="created-at">2027-01-15T08:00:02.000000+00:00</time>' in item
    assert "&#34;no coffee after noon&#34;" in item  # the whole value, as a tree
    assert 'name="confirm" value="yes" required' in item and 'action="/memory/do/delete"' in item


def test_a_filtered_search_under_the_selected_namespace(client: TestClient) -> None:
    page = client.get("/memory", params={"namespace": "users", "filter": '{"kind": "note", "n": {"$gt": 1}}'}).text
    assert _rows(page) == ["users.u2.notes/walk", "users.u1.notes/coffee"]
    assert 'value="{&#34;kind&#34;: &#34;note&#34;, &#34;n&#34;: {&#34;$gt&#34;: 1}}"' in page  # kept in the box
    assert 'name="query"' not in page  # no index: no search by meaning
    nothing = client.get("/memory", params={"filter": '{"kind": "recipe"}'})
    assert nothing.status_code == 200 and "no items match this search" in nothing.text
    bad = client.get("/memory", params={"namespace": "users", "filter": "{kind"})
    assert bad.status_code == 400 and 'id="memory-problem"' in bad.text and "not JSON" in bad.text
    assert 'data-ns="users.u1"' in bad.text  # the tree is still there


def test_items_page_newest_first(client: TestClient) -> None:
    headers = write_headers(client)
    for i in range(MEMORY_PAGE + 5):
        item = {"namespace": ["many"], "key": f"k{i:02d}", "value": {"i": i}}
        assert client.put("/api/store/items", json=item, headers=headers).status_code == 200
    first = client.get("/memory", params={"namespace": "many"}).text
    assert len(_rows(first)) == MEMORY_PAGE and "many/k54" in _rows(first)  # the newest
    more = re.search(r'<a href="([^"]+)" rel="next">', first)
    assert more and f"offset={MEMORY_PAGE}" in more.group(1)
    rest = client.get(more.group(1).replace("&amp;", "&")).text
    assert len(_rows(rest)) == 5 and 'rel="prev"' in rest
    assert set(_rows(first)).isdisjoint(_rows(rest))


def test_a_missing_item_is_a_404_page_saying_so(client: TestClient) -> None:
    r = client.get("/memory", params={"item_ns": "docs", "key": "nope"})
    assert r.status_code == 404 and "no item &#39;nope&#39; in namespace &#39;docs&#39;" in r.text


def test_delete_needs_the_box_ticked_and_confirms(client: TestClient) -> None:
    form = {"namespace": "users.u1.notes", "key": "tea", "back": "users.u1"}
    code, page = _post(client, "/memory/do/delete", form)
    assert code == 400 and "tick the box" in page
    r = client.post("/memory/do/delete", data={**form, "confirm": "yes"}, follow_redirects=False)
    assert r.status_code == 403  # no CSRF token, no Origin
    code, page = _post(client, "/memory/do/delete", {**form, "confirm": "yes"})
    assert code == 200 and "deleted item tea of namespace users.u1.notes" in page
    assert _rows(page) == ["users.u1/profile", "users.u1.notes/coffee"]  # back on users.u1
    code, page = _post(client, "/memory/do/delete", {**form, "confirm": "yes"})
    assert code == 400 and "deleted already" in page


def test_put_adds_or_replaces_an_item_and_shows_it(client: TestClient) -> None:
    code, page = _post(
        client,
        "/memory/do/put",
        {"namespace": "users.u1", "key": "profile", "value": '{"name": "Ada L."}', "back": "users"},
    )
    assert code == 200 and "saved item profile in namespace users.u1" in page
    assert '<span class="item-key">profile</span>' in page and "&#34;Ada L.&#34;" in page
    assert '<time id="created-at">2027-01-15T08:00:03.000000+00:00</time>' in page  # an overwrite keeps it
    code, page = _post(
        client, "/memory/do/put", {"namespace": "teams.t1", "key": "charter", "value": '{"goal": "tea"}'}
    )
    assert code == 200 and 'data-ns="teams.t1"' in page
    code, page = _post(client, "/memory/do/put", {"namespace": "teams", "key": "x", "value": "{nope"})
    assert code == 400 and "must be JSON" in page
    code, page = _post(client, "/memory/do/put", {"namespace": "teams", "key": "x", "value": "[1, 2]"})
    assert code == 400 and "must be a JSON object" in page
    code, page = _post(client, "/memory/do/put", {"namespace": "teams", "key": "", "value": "{}"})
    assert code == 400 and "InvalidMemoryError" in page
    code, page = _post(client, "/memory/do/fly", {})
    assert code == 400 and "unknown action" in page


def test_a_store_without_memory_says_so(tmp_path: Path) -> None:
    with memory_client(FileCheckpointer(tmp_path / "files")) as c:
        r = c.get("/memory")
        assert r.status_code == 200 and 'id="no-memory"' in r.text and "keeps no memory store" in r.text
        code, page = _post(c, "/memory/do/delete", {"namespace": "a", "key": "k", "confirm": "yes"})
        assert code == 404 and "keeps no memory store" in page
        assert c.get("/").status_code == 200  # the rest of the Studio works


def test_mounted_every_link_and_form_is_under_the_mount_path(memory_backend: Checkpointer) -> None:
    from plait.server import StudioConfig, create_app

    studio = create_app(memory_backend, config=StudioConfig(allowed_hosts=("testserver",)))
    with TestClient(mounted(studio)) as c:
        page = c.get(f"{MOUNT}/memory", params={"namespace": "users", "item_ns": "users.u2", "key": "profile"}).text
        urls = re.findall(r'(?:href|action)="([^"]+)"', page)
        assert urls and all(u.startswith((MOUNT + "/", "data:")) for u in urls), urls
        for u in urls:
            if "/memory?" in u:
                assert c.get(u.replace("&amp;", "&")).status_code == 200, u
