"""HEAD on every GET route of the JSON API: the GET's status and headers, no body, and an
event stream that ends instead of running unread."""

from __future__ import annotations

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from plait import SqliteCheckpointer
from plait.server import api, memory

from ._studio_support import MOUNT, mounted_client

PARAMS = {"thread_id": "done", "name": "small", "run_id": "no-such-run"}
STREAMS = ("/events",)


def _get_routes() -> list[str]:
    paths = []
    for route in (*api.router.routes, *memory.router.routes):
        if isinstance(route, APIRoute) and route.path.startswith("/api/") and "GET" in (route.methods or ()):
            paths.append(route.path.replace("{thread_id:thread}", "{thread_id}").format(**PARAMS))
    return paths


def test_every_get_route_of_the_api_answers_head(client: TestClient) -> None:
    paths = _get_routes()
    assert len(paths) >= 15 and "/api/threads/done/history" in paths
    for path in paths:
        head = client.head(path)
        assert head.status_code != 405, path
        assert head.content == b"", path
        if path.endswith(STREAMS):
            assert head.headers["content-type"].startswith("text/event-stream") or head.status_code == 404, path
            continue
        got = client.get(path)
        assert (head.status_code, head.headers["content-type"]) == (got.status_code, got.headers["content-type"]), path
        assert int(head.headers["content-length"]) == len(got.content), path


def test_head_on_a_write_only_path_is_still_refused_with_its_methods(client: TestClient) -> None:
    r = client.head("/api/threads/done/fork")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert "HEAD" in client.put("/api/threads/done").headers["allow"].split(", ")


def test_head_on_the_api_of_a_mounted_studio(saver: SqliteCheckpointer) -> None:
    with mounted_client(saver) as c:
        head, got = c.head(f"{MOUNT}/api/threads/done/history"), c.get(f"{MOUNT}/api/threads/done/history")
        assert (head.status_code, head.content) == (200, b"")
        assert int(head.headers["content-length"]) == len(got.content)
        assert c.head(f"{MOUNT}/threads/done").status_code == 200  # a page, as before
