"""Any thread id plait accepts opens everywhere in the Studio: a ``/`` in it (``user/42``), an
escaped slash (``a%2Fb``), dot segments, spaces, unicode and markup. Each is reached by the
link the thread list renders, read through the API, forked from the page's form into another
odd id (the redirect opens the fork), diffed and deleted; mounted at ``/studio`` too."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from plait import SqliteCheckpointer
from plait.server.render import ID_CHARS

from ._studio_support import MOUNT, ORIGIN, make_client, mounted_client, write_headers

HOSTILE = ["user/42", "org/ticket-7", "a%2Fb", "..", ".", "../x", "a b", "é/ü", "x/history", '<b>"q"</b>/?#&']
"""Ids a URL mangles unless the Studio escapes them (the last ends like a route's suffix)."""
FORKS = {t: HOSTILE[(i + 1) % len(HOSTILE)] + "/fork-1" for i, t in enumerate(HOSTILE)}


def api(thread: str, suffix: str = "") -> str:
    """The API's URL of ``thread`` as an HTTP client writes it: the id one escaped segment
    (dots escaped too, or the client resolves ``..`` before sending)."""
    return "/api/threads/" + quote(thread, safe="").replace(".", "%2E") + suffix


def _link(page: str, thread: str) -> str:
    """The href the thread list gives ``thread``."""
    row = re.search(rf'<tr data-thread="{re.escape(str(escape(thread)))}">.*?href="([^"]+)"', page, re.S)
    assert row, f"{thread!r} is not listed"
    return html.unescape(row.group(1))


def _form(page: str, form: str) -> str:
    found = re.search(rf'<form method="post" action="([^"]+)"[^>]*id="{form}"', page)
    assert found, form
    return html.unescape(found.group(1))


def _tid(page: str) -> str:
    found = re.search(r'<h1><span class="tid">(.*?)</span>', page, re.S)
    assert found
    return html.unescape(found.group(1))


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert found
    return found.group(1)


def _headers(c: TestClient, prefix: str = "") -> dict[str, str]:
    return {"Origin": ORIGIN, "X-CSRF-Token": c.get(prefix + "/api/csrf").json()["csrf_token"]}


def _roundtrip(c: TestClient, thread: str, prefix: str = "") -> None:
    h = (
        write_headers(c)
        if not prefix
        else {"Origin": ORIGIN, "X-CSRF-Token": c.get(prefix + "/api/csrf").json()["csrf_token"]}
    )
    made = c.post(prefix + "/api/threads/done/fork", json={"thread_id": thread}, headers=h)
    assert made.status_code == 201, made.text

    # The list's link opens the thread's page.
    href = _link(c.get(prefix + "/").text, thread)
    assert href.startswith(prefix + "/")
    page = c.get(href)
    assert page.status_code == 200, (href, page.text[:300])
    assert _tid(page.text) == thread

    # The API: summary, history, state, changes.
    assert c.get(prefix + api(thread)).json()["thread_id"] == thread
    history = c.get(prefix + api(thread, "/history")).json()["checkpoints"]
    assert [cp["thread_id"] for cp in history] == [thread]  # a fork starts from one copied checkpoint
    assert c.get(prefix + api(thread, "/state")).json()["values"]["topic"] == "lakes"
    assert c.get(prefix + api(thread, "/changes")).status_code == 200

    # Fork from the page's own form into another odd id; the redirect opens the fork.
    target = FORKS[thread]
    r = c.post(
        _form(page.text, "fork-form"),
        data={"target": target, "edits": '{"style": "short"}', "csrf_token": _csrf(page.text)},
        headers={"Origin": ORIGIN},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text[:300]
    forked = c.get(r.headers["location"])
    assert forked.status_code == 200 and _tid(forked.text) == target and "forked" in forked.text
    assert c.get(prefix + api(target, "/state")).json()["values"]["style"] == "short"

    # Diffed, on the page and through the API.
    diff = c.get(prefix + "/diff", params={"a": thread, "b": target})
    assert diff.status_code == 200 and 'data-key="style"' in diff.text
    for link in re.findall(r'<a href="([^"]+)">open ', diff.text):
        assert c.get(html.unescape(link)).status_code == 200, link
    assert c.get(prefix + "/api/diff", params={"a": thread, "b": target}).status_code == 200

    # Deleted: the fork from its page's form, the thread through the API.
    r = c.post(
        _form(forked.text, "delete-form"),
        data={"confirm": "yes", "csrf_token": _csrf(forked.text)},
        headers={"Origin": ORIGIN},
        follow_redirects=False,
    )
    assert r.status_code == 303 and "deleted thread" in c.get(r.headers["location"]).text
    assert c.delete(prefix + api(thread), headers=h).json()["deleted"] is True
    assert c.get(prefix + api(thread)).status_code == 404
    assert c.get(prefix + api(target)).status_code == 404


@pytest.mark.parametrize("thread", HOSTILE)
def test_an_odd_thread_id_opens_forks_diffs_and_deletes(client: TestClient, thread: str) -> None:
    _roundtrip(client, thread)


@pytest.mark.parametrize("thread", ["user/42", "..", "é/ü"])
def test_an_odd_thread_id_opens_under_a_mount_path(saver: SqliteCheckpointer, thread: str) -> None:
    with mounted_client(saver) as c:
        _roundtrip(c, thread, MOUNT)


def test_a_route_suffix_inside_an_id_is_the_id(client: TestClient) -> None:
    h = write_headers(client)
    assert client.post("/api/threads/done/fork", json={"thread_id": "done/history"}, headers=h).status_code == 201
    assert client.get(api("done/history")).json()["thread_id"] == "done/history"
    assert "checkpoints" in client.get(api("done", "/history")).json()  # the history of done, not a thread


def test_a_long_id_is_cut_short_in_the_list_with_the_whole_id_on_hover(client: TestClient) -> None:
    long = "team/" + "x" * 295
    assert client.post("/api/threads/done/fork", json={"thread_id": long}, headers=_headers(client)).status_code == 201
    page = client.get("/").text
    link = re.search(rf'<a href="[^"]+" class="tid" title="{long}">([^<]*)</a>', page)
    assert link, "the long id's link has no title holding it whole"
    assert len(link.group(1)) == ID_CHARS and link.group(1).endswith("…")
    assert _tid(client.get(_link(page, long)).text) == long  # its page names it whole


@pytest.mark.parametrize(
    ("thread", "shown"),
    [("two\nlines", r"two\nlines"), ("bell\x07\r\t", r"bell\x07\r\t"), ("rtl\u202eevil", r"rtl\u202eevil")],
)
def test_control_characters_in_an_id_are_shown_escaped(client: TestClient, thread: str, shown: str) -> None:
    assert (
        client.post("/api/threads/done/fork", json={"thread_id": thread}, headers=_headers(client)).status_code == 201
    )
    page = client.get("/").text
    row = re.search(rf'<tr data-thread="{re.escape(str(escape(thread)))}">(.*?)</tr>', page, re.S)
    assert row and f">{shown}</a>" in row.group(1) and f'title="{shown}"' in row.group(1)
    text = re.sub(r"<[^>]*>", "", row.group(1))  # what the row shows (a form's value keeps the id)
    assert shown in text and thread not in text
    opened = client.get(_link(page, thread)).text
    assert f'<span class="tid">{shown}</span>' in opened


@pytest.mark.parametrize("thread", [".", ".."])
def test_a_dot_id_is_reached_by_its_query_form(client: TestClient, thread: str) -> None:
    """What the page's script fetches for ``..`` (its lazy values, its event stream's URL)."""
    assert (
        client.post("/api/threads/done/fork", json={"thread_id": thread}, headers=_headers(client)).status_code == 201
    )
    assert client.get("/api/thread", params={"tid": thread}).json()["thread_id"] == thread
    state = client.get("/api/thread/state", params={"tid": thread, "key": "topic"}).json()
    assert state == {"key": "topic", "value": "lakes"}
    page = client.get("/thread", params={"tid": thread}).text
    assert f"/api/thread/events?tid={thread}" in page and _tid(page) == thread
    assert client.get("/api/thread/history").status_code == 404  # no tid: no thread


def test_the_token_redirect_keeps_an_odd_id(saver: SqliteCheckpointer) -> None:
    """Opening the URL ``plait studio`` printed, with a thread's path: the redirect that drops
    the token from the URL lands on the same thread."""
    with make_client(saver, token="s3cret") as c:
        bearer = {"Authorization": "Bearer s3cret"}
        h = {"Origin": ORIGIN, "X-CSRF-Token": c.get("/api/csrf", headers=bearer).json()["csrf_token"], **bearer}
        for thread in ("user/42", "é/ü", "a%2Fb"):
            assert c.post("/api/threads/done/fork", json={"thread_id": thread}, headers=h).status_code == 201
            r = c.get(api(thread).removeprefix("/api") + "?token=s3cret", follow_redirects=False)
            assert r.status_code == 303 and "token" not in r.headers["location"]
            assert _tid(c.get(r.headers["location"]).text) == thread
