"""Who may call ``plait serve``: the API key, CORS for named origins only, the Host check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import AuthenticationError

from plait.serve.app import ServeConfig

from ._serve_support import served

UI = "http://localhost:3000"


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[str]:
    with served(str(tmp_path / "s.db"), config=ServeConfig(api_key="s3cret", cors_origins=(UI,))) as url:
        yield url


def test_every_request_but_ok_needs_the_api_key(locked: str) -> None:
    assert httpx.get(f"{locked}/ok").status_code == 200
    refused = httpx.post(f"{locked}/threads/search", json={})
    assert refused.status_code == 401 and "x-api-key" in refused.json()["message"]
    assert httpx.post(f"{locked}/threads/search", json={}, headers={"x-api-key": "wrong"}).status_code == 401
    with get_sync_client(url=locked, api_key="s3cret") as client:
        assert client.threads.create()["status"] == "idle"
    with get_sync_client(url=locked, api_key="nope") as client, pytest.raises(AuthenticationError):
        client.threads.create()


def test_only_the_named_origin_gets_cors_headers_and_its_preflight_needs_no_key(locked: str) -> None:
    preflight = httpx.options(
        f"{locked}/threads/search",
        headers={"Origin": UI, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == UI
    assert "x-api-key" in preflight.headers["access-control-allow-headers"].lower()
    answer = httpx.post(f"{locked}/threads", json={}, headers={"Origin": UI, "x-api-key": "s3cret"})
    exposed = answer.headers["access-control-expose-headers"].lower()
    assert "content-location" in exposed and "x-pagination-total" in exposed
    other = httpx.post(f"{locked}/threads", json={}, headers={"Origin": "http://evil.example", "x-api-key": "s3cret"})
    assert "access-control-allow-origin" not in other.headers


def test_no_cors_headers_without_named_origins_and_a_foreign_host_is_refused(tmp_path: Path) -> None:
    with served(str(tmp_path / "s.db")) as url:
        answer = httpx.post(f"{url}/threads", json={}, headers={"Origin": UI})
        assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers
        assert httpx.get(f"{url}/ok", headers={"Host": "rebound.example"}).status_code == 421


def test_the_studio_is_served_under_studio_its_links_there_and_its_token_is_the_api_key(locked: str) -> None:
    import re

    assert httpx.get(f"{locked}/studio/").status_code == 401  # the Studio's own check: its token is the key
    with httpx.Client(base_url=locked, follow_redirects=True) as browser:
        page = browser.get("/studio/?token=s3cret")
        assert page.status_code == 200
        links = set(re.findall(r'(?:href|src|action)="(/[^"]*)"', page.text))
        assert links and all(link.startswith("/studio/") for link in links), links
        assert all(browser.get(link).status_code == 200 for link in links if "static" in link)
    assert httpx.get(f"{locked}/studiofoo").status_code == 401  # only /studio/... skips the API key


def test_the_mounted_studio_sends_no_cors_headers_even_to_a_named_origin(locked: str) -> None:
    page = httpx.get(f"{locked}/studio/?token=s3cret", headers={"Origin": UI})
    assert "access-control-allow-origin" not in page.headers
    api = httpx.get(f"{locked}/info", headers={"Origin": UI, "x-api-key": "s3cret"})
    assert api.headers["access-control-allow-origin"] == UI
