"""A login-less local tool's defences: Host check, token, CSRF and Origin on writes, no CORS,
a strict CSP, and no bind beyond loopback without a token."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from ._studio_support import ORIGIN, make_client, write_headers


def test_a_foreign_host_header_is_refused(client: TestClient) -> None:
    r = client.get("/api/threads", headers={"Host": "attacker.example"})
    assert r.status_code == 421 and "Host" in r.text
    assert client.get("/", headers={"Host": "127.0.0.1:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "localhost"}).status_code == 200
    assert client.get("/", headers={"Host": "127.0.0.1.attacker.example"}).status_code == 421


def test_cross_origin_writes_are_refused_and_nothing_is_written(client: TestClient) -> None:
    h = write_headers(client)
    for origin in ("http://attacker.example", "null", None):
        headers = {**h, "Origin": origin} if origin else {"X-CSRF-Token": h["X-CSRF-Token"]}
        r = client.delete("/api/threads/done", headers=headers)
        assert r.status_code == 403 and "Origin" in r.json()["message"]
    assert client.get("/api/threads/done").status_code == 200


def test_writes_without_the_csrf_token_are_refused(client: TestClient) -> None:
    for headers in ({"Origin": ORIGIN}, {"Origin": ORIGIN, "X-CSRF-Token": "guess"}):
        r = client.post("/api/threads/done/fork", json={"thread_id": "x"}, headers=headers)
        assert r.status_code == 403 and "CSRF" in r.json()["message"]
        r = client.post("/threads/done/do/delete", data={"confirm": "yes"}, headers=headers)
        assert r.status_code == 403
    assert client.get("/api/threads/x").status_code == 404
    assert client.get("/api/threads/done").status_code == 200


def test_no_cors_and_a_strict_csp_on_every_response(client: TestClient) -> None:
    for path in ("/", "/api/threads", "/static/studio.js", "/api/threads/nope", "/threads/done"):
        r = client.get(path, headers={"Origin": "http://attacker.example"})
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
        assert r.headers["x-content-type-options"] == "nosniff"
        assert not any(k.lower().startswith("access-control-") for k in r.headers), path
    r = client.options(
        "/api/threads", headers={"Origin": "http://x.example", "Access-Control-Request-Method": "DELETE"}
    )
    assert "access-control-allow-origin" not in r.headers


def test_a_token_is_needed_as_a_header_or_the_one_time_url_cookie(saver: Any) -> None:
    with make_client(saver, token="s3cret") as c:
        r = c.get("/api/threads")
        assert r.status_code == 401 and "token" in r.text
        assert c.get("/api/threads", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/threads", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/api/threads", headers={"X-Plait-Token": "s3cret"}).status_code == 200
        assert c.get("/?token=nope", follow_redirects=False).status_code == 401
        r = c.get("/threads/done?token=s3cret&checkpoint=", follow_redirects=False)
        assert r.status_code == 303 and "token" not in r.headers["location"]
        assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
        assert c.get("/api/threads").status_code == 200  # the cookie now


def test_ids_are_escaped_in_pages(client: TestClient) -> None:
    h = write_headers(client)
    evil = '<script>alert(1)</script>"'
    assert client.post("/api/threads/done/fork", json={"thread_id": evil}, headers=h).status_code == 201
    page = client.get("/").text
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    from urllib.parse import quote

    thread = client.get("/threads/" + quote(evil, safe="")).text
    assert "<script>alert" not in thread


def test_hostile_chat_messages_interrupts_and_form_input_are_escaped(tmp_path: Any) -> None:
    from plait import SqliteCheckpointer

    from ._studio_support import compiled

    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'"
    call = {"name": evil, "args": {evil: evil}, "id": evil}
    messages = [
        {"type": "human", "content": evil, "id": "h1"},
        {"type": "ai", "content": [{"type": "text", "text": evil}, {"type": evil}], "tool_calls": [call], "id": "a1"},
        {"type": "tool", "name": evil, "tool_call_id": evil, "content": evil, "id": "t1"},
    ]
    saver = SqliteCheckpointer(str(tmp_path / "evil.db"))
    compiled(saver).invoke({"topic": evil, "messages": messages}, thread_id="evil")  # waits on its interrupt
    with make_client(saver) as c:
        page = c.get("/threads/evil").text
        assert 'id="chat"' in page and 'id="answer-box"' in page and evil not in page
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
        token = c.get("/api/csrf").json()["csrf_token"]
        hostile = "</textarea>" + evil
        r = c.post(
            "/threads/evil/do/fork",
            data={"target": hostile, "edits": hostile, "csrf_token": token},
            headers={"Origin": ORIGIN},
        )
        assert r.status_code == 400 and 'id="fork-edits-error"' in r.text
        assert "</textarea><script>" not in r.text and "<script>alert" not in r.text
    saver.close()
