"""The thread page for a chat agent: its messages as a conversation beside the state, the
interrupt's question and answer box first on the page, a fork's page showing the edit it was
made with, and a form's error beside its field with the input kept."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from plait import END, START, AppendList, Graph, SqliteCheckpointer, StateSchema
from plait.server import StudioConfig, create_app
from plait.server.chat import SHOWN, chat_of, looks_like_messages, question_of

from ._chat_support import ASK, LONG, QUESTION, chat_graph, start
from ._studio_support import ORIGIN


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[TestClient]:
    saver = SqliteCheckpointer(str(tmp_path / "chat.db"))
    start(saver, "paris")
    app = create_app(saver, [chat_graph()], config=StudioConfig(allowed_hosts=("testserver",)))
    with TestClient(app) as c:
        yield c
    saver.close()


def _post(c: TestClient, path: str, data: dict[str, str]) -> Any:
    token = re.search(r'name="csrf-token" content="([^"]+)"', c.get("/").text)
    assert token
    return c.post(path, data={**data, "csrf_token": token.group(1)}, headers={"Origin": ORIGIN}, follow_redirects=False)


def _section(page: str, id_: str) -> str:
    start_at = page.index(f'id="{id_}"')
    return page[start_at : page.index("</section>", start_at)]


def test_the_chat_view_shows_each_kind_of_message_and_the_waiting_interrupt(chat: TestClient) -> None:
    page = chat.get("/threads/paris").text
    view = _section(page, "chat")
    kinds = re.findall(r'<li class="msg (\w+)"', view)
    assert kinds == ["human", "ai", "tool", "ai", "waiting"]
    assert QUESTION in view and "It is sunny in Paris, 24 °C (friendly tone)." in view  # a string; content blocks
    assert '<b class="tool-name">get_weather</b>' in view and "&#34;city&#34;: &#34;Paris&#34;" in view
    assert "answers <code>call-1</code>" in view and LONG in view
    assert ASK in view and 'href="/threads/paris#answer-box"' in view
    assert "channel <code>messages</code> · 4 messages" in view


def test_the_chat_view_follows_the_selected_checkpoint(chat: TestClient) -> None:
    history = chat.get("/api/threads/paris/history").json()["checkpoints"]
    by_step = {cp["step"]: cp["checkpoint_id"] for cp in history}
    view = _section(chat.get("/threads/paris", params={"checkpoint": by_step[1]}).text, "chat")
    assert re.findall(r'<li class="msg (\w+)"', view) == ["human", "ai"]  # no interrupt: a past step
    assert "data-live" not in view.split(">", 1)[0]
    view = _section(chat.get("/threads/paris", params={"checkpoint": by_step[0]}).text, "chat")
    assert re.findall(r'<li class="msg (\w+)"', view) == ["human"]  # the input


def test_no_chat_view_without_messages(client: TestClient, tmp_path: Path) -> None:
    assert 'id="chat"' in client.get("/threads/done").text  # the small graph's messages (OpenAI's shape)
    saver = SqliteCheckpointer(str(tmp_path / "plain.db"))
    g = Graph(StateSchema.builder().add_lww("x").add("notes", AppendList()).build())
    g.add_node("n", lambda s: {"notes": ["a"]}).add_edge(START, "n").add_edge("n", END)
    g.compile(checkpointer=saver).invoke({"x": 1}, thread_id="plain")
    with TestClient(create_app(saver, config=StudioConfig(allowed_hosts=("testserver",)))) as c:
        page = c.get("/threads/plain").text
        assert 'id="state"' in page and '<section id="chat" data-live hidden></section>' in page
        assert "chat-card" not in page
    saver.close()
    assert not looks_like_messages([]) and not looks_like_messages([{"id": "m1", "text": "not a message"}])
    assert chat_of({"notes": ["a", "b"], "x": 1}) is None


def test_a_chat_channel_by_another_name_and_openais_tool_calls_are_read() -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "otters"}'}}
    got = chat_of(
        {
            "history": [
                {"role": "system", "content": "be brief"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": "c9",
                    "content": [{"type": "text", "text": "fish"}, {"type": "image"}],
                },
            ],
            "other": [1, 2],
        }
    )
    assert got is not None and got.channel == "history"
    system, ai, tool = got.entries
    assert system.kind == "system" and system.texts == ("be brief",)
    assert (
        ai.kind == "ai"
        and ai.texts == ()
        and ai.tool_calls[0].name == "lookup"
        and '"q": "otters"' in ai.tool_calls[0].args
    )
    assert tool.kind == "tool" and tool.tool_call_id == "c9" and tool.texts[0] == "fish" and '"image"' in tool.texts[1]
    long = chat_of({"messages": [{"role": "user", "content": str(i)} for i in range(SHOWN + 5)]})
    assert long is not None and long.earlier == 5 and long.entries[0].texts == ("5",) and len(long.entries) == SHOWN
    assert (
        question_of({"question": "go?", "n": 1}) == "go?" and question_of("go?") == "go?" and question_of([1]) is None
    )


def test_the_interrupt_box_is_first_and_answers_the_interrupt(chat: TestClient) -> None:
    page = chat.get("/threads/paris").text
    assert page.index('id="answer-box"') < page.index('id="timeline"') < page.index('id="actions"')
    box = _section(page, "answer-box")
    assert f'<p class="question">{ASK}</p>' in box and 'id="answer-form"' in box
    assert 'id="answer-form"' not in _section(page, "actions")
    r = _post(chat, "/threads/paris/do/resume", {"resume": '"yes, send it"'})
    assert r.status_code == 303 and "flash=" in r.headers["location"]
    _joined(chat, "paris")
    assert chat.get("/api/threads/paris/state").json()["values"]["sent"] == "yes, send it"
    page = chat.get("/threads/paris").text
    assert '<section id="answer-box" data-live hidden></section>' in page and 'id="answer-form"' not in page
    assert "approved: yes, send it" in _section(page, "chat")


def _joined(c: TestClient, thread: str) -> None:
    """Wait for the thread's Studio run to end: its task, on the app's own loop."""
    run = c.app.state.studio.studio_runs.of_thread(thread, "")[-1]  # type: ignore[attr-defined]
    assert run.task is not None and c.portal is not None

    async def ended() -> None:
        await asyncio.wait([run.task])

    c.portal.call(ended)


def test_a_forks_page_shows_the_edit_it_was_made_with(chat: TestClient) -> None:
    source = chat.get("/api/threads/paris/state").json()["checkpoint_id"]
    r = _post(chat, "/threads/paris/do/fork", {"target": "paris-formal", "edits": '{"tone": "formal"}'})
    assert r.status_code == 303
    page = chat.get("/threads/paris-formal").text
    change = _section(page, "state")
    assert re.findall(r'<tr data-key="([^"]+)"', change) == ["tone"]
    assert "&#34;friendly&#34;" in change and "&#34;formal&#34;" in change
    assert "against the checkpoint it was forked from" in change and f"checkpoint={source}" in change
    meta = chat.get("/api/threads/paris-formal/state").json()["metadata"]
    assert meta["forked_from"] == {"thread_id": "paris", "checkpoint_id": source}
    assert meta["writes"] == {"fork": ["tone"]}
    assert chat.get("/api/threads/paris-formal/changes").json()["keys"] == ["tone"]
    _post(chat, "/threads/paris/do/fork", {"target": "paris-copy", "edits": ""})
    assert "nothing changed" in _section(chat.get("/threads/paris-copy").text, "state")


@pytest.mark.parametrize(
    ("form", "field", "code", "says"),
    [
        ({"target": "paris", "edits": '{"tone": "formal"}'}, "target", 409, "ThreadExistsError"),
        ({"target": "new-one", "edits": '{"tone": '}, "edits", 400, "must be JSON"),
        ({"target": "new-one", "edits": "[1]"}, "edits", 400, "JSON object"),
        ({"target": "", "edits": ""}, "target", 400, "name the new thread"),
    ],
)
def test_a_fork_forms_error_is_beside_its_field_with_the_input_kept(
    chat: TestClient, form: dict[str, str], field: str, code: int, says: str
) -> None:
    r = _post(chat, "/threads/paris/do/fork", form)
    assert r.status_code == code
    page = r.text
    assert 'id="timeline"' in page and 'id="chat"' in page  # the thread's own page, not an error page
    fork_form = page[page.index('id="fork-form"') : page.index("</form>", page.index('id="fork-form"'))]
    error = re.search(rf'<p class="field-error" role="alert" id="fork-{field}-error">(.*?)</p>', fork_form)
    assert error and says in error.group(1)
    assert len(re.findall('class="field-error"', page)) == 1
    assert f'value="{form["target"]}"' in fork_form
    if form["edits"]:
        assert form["edits"].replace('"', "&#34;") in fork_form


def test_the_other_forms_errors_are_beside_their_fields(chat: TestClient) -> None:
    r = _post(chat, "/threads/paris/do/resume", {"resume": "{yes"})
    assert r.status_code == 400
    box = _section(r.text, "answer-box")
    assert 'id="resume-resume-error"' in box and "must be JSON" in box and ">{yes</textarea>" in box
    assert 'aria-invalid="true"' in box
    r = _post(chat, "/threads/paris/do/update", {"values": '["not", "a map"]', "as_node": "answer"})
    assert r.status_code == 400 and 'id="update-values-error"' in r.text
    assert "<option selected>answer</option>" in r.text and "[&#34;not&#34;, &#34;a map&#34;]</textarea>" in r.text
    r = _post(chat, "/threads/paris/do/delete", {})
    assert r.status_code == 400
    actions = _section(r.text, "actions")
    assert "<details open><summary>Delete the thread" in actions and 'id="delete-confirm-error"' in actions
    assert "tick the box" in actions
    _post(chat, "/threads/paris/do/resume", {"resume": "true"})
    _joined(chat, "paris")
    r = _post(chat, "/threads/paris/do/resume", {"resume": "true"})  # answered already (another tab)
    assert r.status_code == 400 and "No interrupt to answer" in _section(r.text, "answer-box")
    assert 'id="resume-resume-error"' in r.text and "InvalidResumeError" in r.text
    r = _post(chat, "/threads/paris/do/fly", {})  # no form: the error page, as before
    assert r.status_code == 400 and 'id="problem"' in r.text


def test_a_memory_put_error_is_beside_its_field(chat: TestClient) -> None:
    r = _post(chat, "/memory/do/put", {"namespace": "users.u1", "key": "tea", "value": '{"likes": ', "back": ""})
    assert r.status_code == 400
    put = _section(r.text, "put-item")
    assert "<details open>" in put and 'id="put-value-error"' in put and "must be JSON" in put
    assert 'value="users.u1"' in put and 'value="tea"' in put and "{&#34;likes&#34;: </textarea>" in put
    r = _post(chat, "/memory/do/put", {"namespace": "users..u1", "key": "tea", "value": "{}", "back": ""})
    assert r.status_code == 400 and 'id="put-namespace-error"' in r.text
    assert _post(chat, "/memory/do/put", {"namespace": "users.u1", "key": "tea", "value": "{}"}).status_code == 303
    r = _post(chat, "/memory/do/delete", {"namespace": "users.u1", "key": "tea", "back": ""})
    assert r.status_code == 400 and 'id="delete-item-confirm-error"' in _section(r.text, "item")
