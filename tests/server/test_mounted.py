"""The Studio mounted in another app (``plait serve`` mounts it at ``/studio``): every URL it
emits is under the mount path (links, assets, forms, lazy values, live streams, redirects,
the token cookie), its writes still need the CSRF token and the Studio's own Origin, and the
host runs its startup and shutdown through ``studio_lifespan``."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from plait.errors import CheckpointError
from plait.server import StudioConfig, create_app, studio_lifespan

from ._studio_support import ELSEWHERE, MOUNT, ORIGIN, make_client, mounted, mounted_client

URL_ATTRIBUTES = re.compile(r'\b(href|src|action|data-sse|data-lazy)="([^"]*)"')


@pytest.fixture
def client(saver: Any) -> Iterator[TestClient]:
    with mounted_client(saver) as c:
        yield c


def _urls(page: str) -> list[tuple[str, str]]:
    """Every (attribute, URL) of a page, but the inline icon's ``data:``."""
    return [(a, html.unescape(u)) for a, u in URL_ATTRIBUTES.findall(page) if not u.startswith("data:")]


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert m
    return m.group(1)


def _post(c: TestClient, path: str, data: dict[str, str]) -> Any:
    token = _csrf(c.get(f"{MOUNT}/").text)
    return c.post(path, data={**data, "csrf_token": token}, headers={"Origin": ORIGIN}, follow_redirects=False)


def test_every_url_a_page_emits_is_under_the_mount_path_and_resolves(client: TestClient) -> None:
    big = ["x" * 100] * 100  # a value large enough to be loaded lazily (data-lazy)
    token = client.get(f"{MOUNT}/api/csrf").json()["csrf_token"]
    r = client.post(
        f"{MOUNT}/api/threads/done/state",
        json={"values": {"notes": big}},
        headers={"Origin": ORIGIN, "X-CSRF-Token": token},
    )
    assert r.status_code == 201, r.text
    pages = [
        "/",
        "/threads/waiting",
        "/threads/done",
        "/diff?a=waiting&b=done",
        "/diff",
        "/runs",
        "/threads/nope",  # an error page: its back link too
    ]
    seen: dict[str, set[str]] = {}
    for path in pages:
        page = client.get(MOUNT + path)
        assert page.status_code in (200, 404), (path, page.text)
        for attribute, url in _urls(page.text):
            assert url.startswith(MOUNT + "/"), (path, attribute, url)
            seen.setdefault(attribute, set()).add(url)
    assert {"href", "src", "action", "data-sse", "data-lazy"} <= set(seen)
    assert {f"{MOUNT}/static/studio.css", f"{MOUNT}/static/studio.js"} <= seen["href"] | seen["src"]
    assert f"{MOUNT}/api/events" in seen["data-sse"] and f"{MOUNT}/api/threads/done/events" in seen["data-sse"]
    for url in sorted(seen["href"] | seen["src"] | seen["data-lazy"]):
        assert client.get(url).status_code == 200, url
    for url in sorted(seen["action"]):  # the GET forms (filters, diff) and where the POST forms go
        if "/do/" not in url:
            assert client.get(url).status_code == 200, url
    assert client.get(f"{MOUNT}/static/studio.css").headers["content-type"].startswith("text/css")
    assert client.get("/threads/done").status_code == ELSEWHERE  # without the mount path: the host's


def test_the_forms_write_and_redirect_under_the_mount_path(client: TestClient) -> None:
    r = _post(client, f"{MOUNT}/threads/waiting/do/fork", {"target": "forked"})
    assert r.status_code == 303 and r.headers["location"].startswith(f"{MOUNT}/threads/forked?flash="), r.headers
    page = client.get(r.headers["location"]).text
    assert "forked waiting into forked" in page and 'href="/studio/threads/forked?checkpoint=' in page

    r = _post(client, f"{MOUNT}/threads/done/do/update", {"values": '{"topic": "ponds"}', "as_node": ""})
    assert r.status_code == 303 and r.headers["location"].startswith(f"{MOUNT}/threads/done?flash=")
    assert "state updated" in client.get(r.headers["location"]).text
    assert client.get(f"{MOUNT}/api/threads/done/state").json()["values"]["topic"] == "ponds"

    r = _post(client, f"{MOUNT}/threads/waiting/do/resume", {"resume": '"go"'})
    assert r.status_code == 303 and "answered the interrupt" in client.get(r.headers["location"]).text

    r = _post(client, f"{MOUNT}/threads/forked/do/delete", {"confirm": "yes"})
    assert r.status_code == 303 and r.headers["location"].startswith(f"{MOUNT}/?flash=")
    assert "deleted thread forked" in client.get(r.headers["location"]).text

    refused = _post(client, f"{MOUNT}/threads/done/do/fork", {"target": ""})
    assert refused.status_code == 400 and 'id="fork-target-error"' in refused.text  # beside the field
    assert 'action="/studio/threads/done/do/fork"' in refused.text  # the form again, to send once corrected


def test_writes_under_the_mount_path_keep_the_host_origin_and_csrf_checks(client: TestClient) -> None:
    token = client.get(f"{MOUNT}/api/csrf").json()["csrf_token"]
    fork = {"thread_id": "copy"}
    for headers in (
        {"Origin": "http://attacker.example", "X-CSRF-Token": token},
        {"Origin": f"{ORIGIN}{MOUNT}", "X-CSRF-Token": token},  # an Origin is scheme and host, never a path
        {"X-CSRF-Token": token},
    ):
        r = client.post(f"{MOUNT}/api/threads/done/fork", json=fork, headers=headers)
        assert r.status_code == 403 and "Origin" in r.json()["message"], headers
    for headers in ({"Origin": ORIGIN}, {"Origin": ORIGIN, "X-CSRF-Token": "guess"}):
        r = client.post(f"{MOUNT}/api/threads/done/fork", json=fork, headers=headers)
        assert r.status_code == 403 and "CSRF" in r.json()["message"]
        form = {"confirm": "yes", "csrf_token": headers.get("X-CSRF-Token", "")}
        assert client.post(f"{MOUNT}/threads/done/do/delete", data=form, headers=headers).status_code == 403
    assert client.get(f"{MOUNT}/api/threads/copy").status_code == 404
    r = client.post(f"{MOUNT}/api/threads/done/fork", json=fork, headers={"Origin": ORIGIN, "X-CSRF-Token": token})
    assert r.status_code == 201, r.text
    assert client.get(f"{MOUNT}/api/threads/copy").status_code == 200
    assert client.get(f"{MOUNT}/api/threads", headers={"Host": "attacker.example"}).status_code == 421
    shown = client.get(f"{MOUNT}/", headers={"Origin": "http://attacker.example"})
    assert shown.headers["content-security-policy"].startswith("default-src 'self'")
    assert not any(k.lower().startswith("access-control-") for k in shown.headers)


def test_the_token_url_redirects_and_sets_its_cookie_under_the_mount_path(saver: Any) -> None:
    with mounted_client(saver, token="s3cret") as c:
        assert c.get(f"{MOUNT}/api/threads").status_code == 401
        r = c.get(f"{MOUNT}/threads/done?token=s3cret&checkpoint=", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == f"{MOUNT}/threads/done?checkpoint="
        cookie = r.headers["set-cookie"].lower()
        assert f"path={MOUNT}" in cookie and "httponly" in cookie and "samesite=strict" in cookie
        assert c.get(f"{MOUNT}/api/threads").status_code == 200  # the cookie now
    with make_client(saver, token="s3cret") as c:  # at the root of its own server: as before
        r = c.get("/threads/done?token=s3cret", follow_redirects=False)
        assert r.headers["location"] == "/threads/done" and "path=/;" in r.headers["set-cookie"].lower()


def test_the_host_runs_the_mounted_studios_lifespan_which_closes_what_it_opened(db: str) -> None:
    served = StudioConfig(allowed_hosts=("testserver",))
    studio = create_app(db, config=served)  # opened from its address: the Studio's shutdown closes it
    store = studio.state.studio.checkpointer
    with TestClient(mounted(studio)) as c:
        assert [t["thread_id"] for t in c.get(f"{MOUNT}/api/threads").json()["threads"]] == ["done", "waiting"]
    with pytest.raises(CheckpointError, match="closed"):
        asyncio.run(store.aget_thread("done"))


def test_studio_lifespan_takes_only_a_studio() -> None:
    with pytest.raises(TypeError, match="create_app"):
        studio_lifespan(FastAPI())
