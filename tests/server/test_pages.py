"""The page without JavaScript: every view renders from the server, every form posts and
redirects back with a confirmation of what it did, and errors are pages, not 500s."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ._studio_support import ORIGIN


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert m
    return m.group(1)


def _post(c: TestClient, path: str, data: dict[str, str]) -> tuple[int, str]:
    token = _csrf(c.get("/").text)
    r = c.post(path, data={**data, "csrf_token": token}, headers={"Origin": ORIGIN}, follow_redirects=False)
    if r.status_code != 303:
        return r.status_code, r.text
    page = c.get(r.headers["location"])
    return page.status_code, page.text


def test_the_thread_list_shows_badges_and_filters(client: TestClient) -> None:
    page = client.get("/").text
    assert 'class="badge interrupted"' in page and 'class="badge idle"' in page
    assert 'href="/threads/waiting"' in page and 'href="/threads/done"' in page
    only = client.get("/", params={"status": "idle"}).text
    assert 'href="/threads/done"' in only and 'href="/threads/waiting"' not in only
    assert 'href="/threads/done"' not in client.get("/", params={"q": "wai"}).text
    assert 'href="/threads/waiting"' not in client.get("/", params={"metadata": "source=loop", "status": "idle"}).text
    bad = client.get("/", params={"metadata": "nokeyvalue"})
    assert bad.status_code == 400 and "key=value" in bad.text


def test_a_thread_page_has_its_timeline_state_change_graph_and_forms(client: TestClient) -> None:
    page = client.get("/threads/waiting").text
    assert page.count('name="pick"') == 2 and 'aria-current="true"' in page
    assert "Waiting for an answer in <b>ask</b>" in page
    assert 'data-key="notes"' in page and "What step" in page
    assert 'data-name="ask" data-state="next"' in page
    for form in ("answer-form", "update-form", "fork-form", "delete-form"):
        assert f'id="{form}"' in page
    root = re.findall(r'name="pick" value="waiting@([0-9a-f]+)"', page)[-1]
    deep = client.get(f"/threads/waiting?checkpoint={root}").text
    assert f"<code>{root}</code>" in deep and "Run from step 0" in deep
    missing = client.get("/threads/nope")
    assert missing.status_code == 404 and "CheckpointNotFoundError" in missing.text
    assert client.get("/threads/waiting?checkpoint=0000").status_code == 404


def test_a_large_value_is_lazy(client: TestClient) -> None:
    token = client.get("/api/csrf").json()["csrf_token"]
    big = ["x" * 100] * 100
    client.post(
        "/api/threads/done/state",
        json={"values": {"notes": big}},
        headers={"Origin": ORIGIN, "X-CSRF-Token": token},
    )
    page = client.get("/threads/done").text
    m = re.search(r'data-lazy="([^"]*/state\?[^"]+)"', page)
    assert m and "key=notes" in m.group(1)
    assert len(client.get(m.group(1).replace("&amp;", "&")).json()["value"]) == 101


def test_selecting_two_checkpoints_shows_their_diff_also_across_threads(client: TestClient) -> None:
    picks = re.findall(r'name="pick" value="([^"]+)"', client.get("/threads/done").text)
    page = client.get("/diff", params=[("pick", picks[0]), ("pick", picks[-1])])
    assert page.status_code == 200 and 'data-key="answer"' in page.text and 'class="add"' in page.text
    across = client.get("/diff", params={"a": "waiting", "b": "done"}).text
    assert 'data-key="topic"' in across and "rivers" in across and "lakes" in across
    listed = re.findall(r'name="pick" value="([^"]+)"', client.get("/").text)
    assert sorted(p.split("@")[0] for p in listed) == ["done", "waiting"]
    two = client.get("/diff", params=[("pick", p) for p in listed]).text
    assert 'data-key="topic"' in two
    one = client.get("/diff", params=[("pick", picks[0])])
    assert one.status_code == 400 and "select two" in one.text
    assert client.get("/diff", params={"a": "done", "b": "nope"}).status_code == 404
    assert client.get("/diff").status_code == 200


def test_the_forms_edit_fork_answer_and_delete_with_a_confirmation(client: TestClient) -> None:
    code, page = _post(client, "/threads/done/do/update", {"values": '{"topic": "ponds"}', "as_node": ""})
    assert code == 200 and 'class="flash"' in page and "state updated" in page
    code, page = _post(client, "/threads/done/do/fork", {"target": "done-2", "edits": '{"style": "short"}'})
    assert code == 200 and "forked done into done-2 with edits to style" in page
    assert client.get("/api/threads/done-2/state").json()["values"]["style"] == "short"
    code, page = _post(client, "/threads/waiting/do/resume", {"resume": '"go"'})
    assert code == 200 and "answered the interrupt" in page
    code, page = _post(client, "/threads/done-2/do/delete", {})
    assert code == 400 and "tick the box" in page
    code, page = _post(client, "/threads/done-2/do/delete", {"confirm": "yes"})
    assert code == 200 and "deleted thread done-2" in page
    code, page = _post(client, "/threads/done/do/update", {"values": "{nope"})
    assert code == 400 and "must be JSON" in page
    code, page = _post(client, "/threads/done/do/fly", {})
    assert code == 400 and "unknown action" in page


def test_without_a_graph_the_forms_say_to_pass_one(bare: TestClient) -> None:
    page = bare.get("/threads/waiting").text
    assert "--graph MODULE:GRAPH" in page and "disabled" in page
    code, text = _post(bare, "/threads/waiting/do/resume", {"resume": "1"})
    assert code == 400 and "--graph" in text


def test_a_failed_thread_shows_its_stored_error(tmp_path: Any) -> None:
    from plait import END, START, Graph, NodeError, SqliteCheckpointer, StateSchema

    from ._studio_support import make_client

    def boom(state: Any) -> dict[str, Any]:
        raise ValueError("the API said no")

    g = Graph(StateSchema.builder().add_lww("x").build()).add_node("boom", boom)
    g.add_edge(START, "boom").add_edge("boom", END)
    saver = SqliteCheckpointer(tmp_path / "e.db")
    with pytest.raises(NodeError):
        g.compile(checkpointer=saver).invoke({"x": 1}, thread_id="broken")
    with make_client(saver, graphs=False) as c:
        s = c.get("/api/threads/broken").json()
        assert s["status"] == "error" and s["errors"][0]["node"] == "boom"
        assert "the API said no" in s["errors"][0]["message"]
        page = c.get("/threads/broken").text
        assert 'class="badge error"' in page and "the API said no" in page and "a task failed" in page
    saver.close()


def test_a_chat_in_langchains_shape_renders_and_its_diff_is_by_message(tmp_path: Any) -> None:
    """A chat written by ctx.stream_message (LangChain's shape, content blocks too) shows as
    the state's tree, and two checkpoints differ by the messages added, matched by id."""
    from plait import END, START, Graph, MessagesState, NodeContext, SqliteCheckpointer

    from ._studio_support import make_client

    def chat(state: Any, ctx: NodeContext) -> dict[str, Any]:
        blocks = [
            {"content": [{"type": "text", "text": "Otters eat ", "index": 0}]},
            {"content": [{"index": 0, "text": "fish."}]},
        ]
        return {"messages": [ctx.stream_message(blocks)]}

    g = Graph(MessagesState).add_node("chat", chat).add_edge(START, "chat").add_edge("chat", END)
    saver = SqliteCheckpointer(tmp_path / "chat.db")
    ask = {"messages": [{"type": "human", "content": [{"type": "text", "text": "What do otters eat?"}]}]}
    g.compile(checkpointer=saver).invoke(ask, thread_id="otters")
    with make_client(saver, graphs=False) as c:
        page = c.get("/threads/otters").text
        assert 'data-key="messages"' in page
        for shown in ("human", "ai", "What do otters eat?", "Otters eat fish."):
            assert f'<span class="v str">&#34;{shown}&#34;</span>' in page, shown
        assert '<span class="k">tool_calls</span>' in page
        picks = re.findall(r'name="pick" value="([^"]+)"', page)
        diff = c.get("/diff", params=[("pick", picks[0]), ("pick", picks[-1])]).text
        assert '<ul class="change messages"><li class="add">' in diff and "&#34;Otters eat fish.&#34;" in diff
    saver.close()


@pytest.mark.parametrize("path", ["/", "/threads/waiting", "/diff", "/runs", "/memory"])
def test_a_page_answers_head_as_get_does(client: TestClient, path: str) -> None:
    got, head = client.get(path), client.head(path)
    assert head.status_code == got.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    assert client.head("/threads/nope").status_code == 404
    assert client.request("PUT", "/").status_code == 405
