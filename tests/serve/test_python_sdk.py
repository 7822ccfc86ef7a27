"""``plait serve`` driven by the unmodified ``langgraph-sdk`` Python client (pinned in the dev
extra), on a SQLite store: what a LangGraph client does, end to end over real HTTP.

The client is typed ``Any`` here: the SDK's annotations are looser than its answers (its
``threads.copy`` is annotated to return None), and these tests check the answers."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from plait.serve.assistants import assistant_id_of

from ._serve_support import ENTERED


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _contents(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


def _wait_status(client: Any, thread_id: str, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while client.runs.get(thread_id, run_id)["status"] != status:
        assert time.monotonic() < deadline, f"run {run_id} never became {status}"
        time.sleep(0.02)


def test_the_assistants_are_the_served_graphs_by_name_and_stable_id(client: Any) -> None:
    found = {a["graph_id"]: a for a in client.assistants.search()}
    assert set(found) == {"chat", "steps", "nested"}
    assert found["chat"]["assistant_id"] == assistant_id_of("chat")
    assert found["chat"]["metadata"] == {"created_by": "system"}
    by_id = client.assistants.get(assistant_id_of("chat"))
    assert client.assistants.get("chat")["assistant_id"] == by_id["assistant_id"]
    drawn = client.assistants.get_graph("chat")
    assert {n["id"] for n in drawn["nodes"]} >= {"__start__", "gate", "reply", "approve", "__end__"}
    assert ("__start__", "gate") in [(e["source"], e["target"]) for e in drawn["edges"]]
    with pytest.raises(NotFoundError):
        client.assistants.get("nobody")


def test_a_thread_is_made_found_edited_counted_and_deleted(client: Any) -> None:
    t = client.threads.create(metadata={"user": "ada"}, thread_id="t-1")
    assert (t["thread_id"], t["status"], t["metadata"], t["values"]) == ("t-1", "idle", {"user": "ada"}, None)
    with pytest.raises(ConflictError):
        client.threads.create(thread_id="t-1")
    assert client.threads.create(thread_id="t-1", if_exists="do_nothing")["metadata"] == {"user": "ada"}
    client.threads.create(metadata={"user": "bob"})
    assert [x["thread_id"] for x in client.threads.search(metadata={"user": "ada"})] == ["t-1"]
    assert client.threads.count(metadata={"user": "bob"}) == 1
    assert client.threads.update("t-1", metadata={"topic": "rivers"})["metadata"] == {"user": "ada", "topic": "rivers"}
    client.threads.delete("t-1")
    with pytest.raises(NotFoundError):
        client.threads.get("t-1")


def test_a_streamed_run_sends_metadata_first_then_the_state_with_increasing_ids(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(thread, "chat", input=_say("hi"), stream_mode=["values", "updates"]))
    assert parts[0].event == "metadata" and set(parts[0].data) == {"run_id", "attempt"}
    ids = [int(p.id) for p in parts if p.id is not None]
    assert ids == sorted(set(ids)) and len(ids) == len(parts)
    assert [p.data for p in parts if p.event == "updates"][-1]["reply"]["messages"][0]["content"] == "echo: hi"
    assert _contents([p.data for p in parts if p.event == "values"][-1]) == ["hi", "echo: hi"]
    run = client.runs.get(thread, parts[0].data["run_id"])
    assert run["status"] == "success"
    thread_doc = client.threads.get(thread)
    assert thread_doc["status"] == "idle" and thread_doc["metadata"]["graph_id"] == "chat"
    assert thread_doc["metadata"]["assistant_id"] == assistant_id_of("chat")


def test_an_interrupt_is_shown_and_answered_with_command_resume(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(thread, "chat", input=_say("please approve"), stream_mode="values"))
    last = parts[-1].data
    assert last["__interrupt__"][0]["value"] == {"question": "send it?"}
    assert _contents(last) == ["please approve", "echo: please approve"]  # the values come with the pause
    doc = client.threads.get(thread)
    assert doc["status"] == "interrupted"
    assert [i["value"] for group in doc["interrupts"].values() for i in group] == [{"question": "send it?"}]
    state = client.threads.get_state(thread)
    assert state["next"] == ["approve"] and state["tasks"][0]["interrupts"][0]["id"] == last["__interrupt__"][0]["id"]
    out = client.runs.wait(thread, "chat", command={"resume": "yes"})
    assert _contents(out)[-1] == "approved: yes"
    assert client.threads.get(thread)["status"] == "idle"


def test_agent_chat_ui_answers_an_interrupt_with_an_empty_input_beside_its_command(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("approve"))
    head = client.threads.get_state(thread)["checkpoint"]
    out = client.runs.wait(thread, "chat", input={}, command={"resume": "ok"}, checkpoint=head)
    assert _contents(out)[-1] == "approved: ok"


def test_the_head_sent_with_a_turn_is_the_same_as_none(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("one"))
    head = client.threads.get_state(thread)["checkpoint"]
    out = client.runs.wait(thread, "chat", input=_say("two"), checkpoint=head)
    assert _contents(out) == ["one", "echo: one", "two", "echo: two"]
    assert len(client.threads.get_history(thread, limit=100)) == 7  # the root, then input, gate, reply a turn


def test_update_state_history_and_a_branch_from_a_past_checkpoint(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("first"))
    client.runs.wait(thread, "chat", input=_say("second"))
    history = client.threads.get_history(thread, limit=10)
    assert [h["metadata"]["step"] for h in history] == sorted((h["metadata"]["step"] for h in history), reverse=True)
    assert history[0]["parent_checkpoint"]["checkpoint_id"] == history[1]["checkpoint"]["checkpoint_id"]
    assert len(client.threads.get_history(thread, limit=2)) == 2
    # edit the second message: branch from the parent of the state that holds it
    holds = next(h for h in reversed(history) if "second" in _contents(h["values"]))
    out = client.runs.wait(thread, "chat", input=_say("edited"), checkpoint=holds["parent_checkpoint"])
    assert _contents(out) == ["first", "echo: first", "edited", "echo: edited"]
    assert _contents(client.threads.get_state(thread)["values"]) == _contents(out)
    # update_state as a node, then the history's head is that update
    client.threads.update_state(thread, {"messages": [{"role": "assistant", "content": "by hand"}]}, as_node="reply")
    assert _contents(client.threads.get_state(thread)["values"])[-1] == "by hand"
    assert client.threads.get_history(thread, limit=1)[0]["metadata"]["source"] == "update"


def test_regenerate_sends_only_a_past_checkpoint_and_runs_what_comes_next(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("again"))
    before_reply = next(h for h in client.threads.get_history(thread) if h["next"] == ["reply"])
    out = client.runs.wait(thread, "chat", input=None, checkpoint=before_reply["checkpoint"])
    assert _contents(out) == ["again", "echo: again"]


def test_copy_copies_the_whole_history(client: Any) -> None:
    thread = client.threads.create(metadata={"k": 1})["thread_id"]
    client.runs.wait(thread, "chat", input=_say("one"))
    client.runs.wait(thread, "chat", input=_say("approve two"))
    copy = client.threads.copy(thread)
    assert copy["thread_id"] != thread and copy["metadata"]["k"] == 1
    assert copy["status"] == "interrupted"
    a = [h["checkpoint"]["checkpoint_id"] for h in client.threads.get_history(thread, limit=50)]
    b = [h["checkpoint"]["checkpoint_id"] for h in client.threads.get_history(copy["thread_id"], limit=50)]
    assert a == b and len(a) == 7  # the root and two turns
    out = client.runs.wait(copy["thread_id"], "chat", command={"resume": "from the copy"})
    assert _contents(out)[-1] == "approved: from the copy"
    assert client.threads.get(thread)["status"] == "interrupted"  # the source is untouched


def test_a_failed_run_is_raised_by_wait_and_join_and_streams_an_error_event(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    with pytest.raises(Exception, match="RuntimeError: .*the gate refused 'fail'"):  # the node's own error
        client.runs.wait(thread, "chat", input=_say("fail"))
    parts = list(client.runs.stream(thread, "chat", input={"turns": "bad"}))  # refused by the Sum reducer
    assert parts[-1].event == "error" and parts[-1].data["error"] == "InvalidUpdateError"
    runs = client.runs.list(thread)
    assert [r["status"] for r in runs] == ["error", "error"]
    joined = client.runs.join(thread, runs[0]["run_id"])  # join hands the error document back as it is
    assert joined["__error__"]["error"] == "InvalidUpdateError"


def test_reject_is_a_conflict_and_enqueue_runs_after_the_active_run(client: Any, gate: threading.Event) -> None:
    thread = client.threads.create()["thread_id"]
    held = client.runs.create(thread, "chat", input=_say("hold"))
    _wait_status(client, thread, held["run_id"], "running")
    assert client.threads.get(thread)["status"] == "busy"
    with pytest.raises(ConflictError):
        client.runs.create(thread, "chat", input=_say("no"), multitask_strategy="reject")
    queued = client.runs.create(thread, "chat", input=_say("after"))  # enqueue is the default
    assert client.runs.get(thread, queued["run_id"])["status"] == "pending"
    gate.set()
    out = client.runs.join(thread, queued["run_id"])
    assert _contents(out) == ["hold", "echo: hold", "after", "echo: after"]
    assert [r["status"] for r in client.runs.list(thread)] == ["success", "success"]


def test_cancel_with_interrupt_keeps_what_the_run_wrote_and_rollback_drops_it(
    client: Any, gate: threading.Event
) -> None:
    kept = client.threads.create()["thread_id"]
    run = client.runs.create(kept, "chat", input=_say("hold"))
    assert ENTERED["hold"].wait(30)  # inside its first node: the stop comes at the boundary after it
    client.runs.cancel(kept, run["run_id"], action="interrupt")
    gate.set()
    client.runs.join(kept, run["run_id"])
    assert client.runs.get(kept, run["run_id"])["status"] == "interrupted"
    state = client.threads.get_state(kept)
    assert _contents(state["values"]) == ["hold"] and state["next"] == ["reply"]  # stopped at the boundary

    gate.clear()
    ENTERED["hold"].clear()
    rolled = client.threads.create()["thread_id"]
    client.runs.wait(rolled, "chat", input=_say("first"))
    before = client.threads.get_state(rolled)["checkpoint"]["checkpoint_id"]
    run = client.runs.create(rolled, "chat", input=_say("hold"))
    assert ENTERED["hold"].wait(30)
    threading.Timer(0.2, gate.set).start()
    client.runs.cancel(rolled, run["run_id"], wait=True, action="rollback")
    assert client.threads.get_state(rolled)["checkpoint"]["checkpoint_id"] == before
    with pytest.raises(NotFoundError):
        client.runs.get(rolled, run["run_id"])


def test_a_stream_is_rejoined_after_the_last_event_id_it_had(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    run = client.runs.create(thread, "steps", input={"n": 0}, stream_mode=["values", "updates"])
    whole = list(client.runs.join_stream(thread, run["run_id"], last_event_id="-1"))
    ids = [int(p.id) for p in whole]
    assert ids == list(range(1, len(ids) + 1)) and whole[0].event == "metadata"
    assert [p.data for p in whole if p.event == "values"][-1] == {"n": 10}
    later = list(client.runs.join_stream(thread, run["run_id"], last_event_id=str(ids[4])))
    assert [int(p.id) for p in later] == ids[5:]
    assert [(p.event, p.data) for p in later] == [(p.event, p.data) for p in whole[5:]]


def test_a_stateless_run_leaves_no_thread(client: Any) -> None:
    out = client.runs.wait(None, "steps", input={"n": 0})
    assert out == {"n": 10}
    assert client.threads.search() == []


def test_bad_requests_are_4xx_in_the_sdk_error_shape_and_write_nothing(url: str, client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    with pytest.raises(NotFoundError, match="no assistant 'nobody'"):
        client.runs.create(thread, "nobody", input=_say("x"))
    with pytest.raises(NotFoundError, match="thread 'missing' was not found"):
        client.runs.create("missing", "chat", input=_say("x"))
    with pytest.raises(NotFoundError):
        client.runs.create(thread, "chat", input=_say("x"), checkpoint_id="0" * 22)
    with pytest.raises(UnprocessableEntityError, match="stream_mode"):
        client.runs.create(thread, "chat", input=_say("x"), stream_mode="sideways")
    with pytest.raises(httpx.HTTPStatusError, match="404"):  # runs.wait raises httpx's own error
        client.runs.wait(thread, "nobody", input=_say("x"))
    r = httpx.post(f"{url}/threads/{thread}/runs/wait", content=b"{not json")
    assert r.status_code == 422 and r.json()["error"] == "ServeRequestError"
    assert client.runs.list(thread) == [] and client.threads.get_state(thread)["values"] == {}


def test_an_answer_streams_token_by_token_as_messages_tuple_events(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    parts = list(
        client.runs.stream(thread, "chat", input=_say("tell me more"), stream_mode=["messages-tuple", "values"])
    )
    chunks = [p.data for p in parts if p.event == "messages"]
    assert [c["content"] for c, _ in chunks] == ["echo", ": ", "tell", " me", " more"]
    assert {c["type"] for c, _ in chunks} == {"AIMessageChunk"} and len({c["id"] for c, _ in chunks}) == 1
    meta = chunks[0][1]
    assert (meta["langgraph_node"], meta["thread_id"]) == ("reply", thread)
    final = [p.data for p in parts if p.event == "values"][-1]["messages"][-1]
    assert (final["type"], final["content"], final["id"]) == ("ai", "echo: tell me more", chunks[0][0]["id"])
    first_chunk = next(i for i, p in enumerate(parts) if p.event == "messages")
    last_values = max(i for i, p in enumerate(parts) if p.event == "values")
    assert first_chunk < last_values  # the tokens come before the step that holds the answer ends


def test_the_first_message_is_edited_like_any_other_from_the_parent_of_its_state(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("frist"))
    history = client.threads.get_history(thread, limit=10)
    holds = next(h for h in reversed(history) if "frist" in _contents(h["values"]))
    root = holds["parent_checkpoint"]
    assert root is not None and history[-1]["checkpoint"] == root and history[-1]["values"]["messages"] == []
    out = client.runs.wait(thread, "chat", input=_say("first"), checkpoint=root)
    assert _contents(out) == ["first", "echo: first"]


def test_the_history_keeps_the_branch_an_edit_left_so_a_client_can_switch_back(client: Any) -> None:
    """As LangGraph's: every branch's states, newest first; the edited message's two versions
    are siblings (one parent), which is what useStream's "1 / 2" switcher is built from."""
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("one"))
    client.runs.wait(thread, "chat", input=_say("tow"))
    before_edit = client.threads.get_history(thread, limit=100)
    holds = next(h for h in reversed(before_edit) if "tow" in _contents(h["values"]))
    client.runs.wait(thread, "chat", input=_say("two"), checkpoint=holds["parent_checkpoint"])
    history = client.threads.get_history(thread, limit=100)
    ids = [h["checkpoint"]["checkpoint_id"] for h in history]
    assert ids == sorted(ids, reverse=True) and len(ids) == len(set(ids))
    assert set(ids) > {h["checkpoint"]["checkpoint_id"] for h in before_edit}  # the old branch is all there
    assert _contents(history[0]["values"]) == ["one", "echo: one", "two", "echo: two"]  # the head first
    old_tip = next(h for h in history if _contents(h["values"])[-1:] == ["echo: tow"])
    assert old_tip["checkpoint"]["checkpoint_id"] == before_edit[0]["checkpoint"]["checkpoint_id"]
    parent = holds["parent_checkpoint"]["checkpoint_id"]
    children = [h for h in history if (h["parent_checkpoint"] or {}).get("checkpoint_id") == parent]
    assert sorted(_contents(h["values"])[-1] for h in children) == ["tow", "two"]
    newest = client.threads.get_history(thread, limit=3)
    assert [h["checkpoint"]["checkpoint_id"] for h in newest] == ids[:3]
    below = client.threads.get_history(thread, limit=100, before={"configurable": {"checkpoint_id": ids[2]}})
    assert [h["checkpoint"]["checkpoint_id"] for h in below] == ids[3:]


def test_the_tutorial_agents_approval_turn_stores_six_states_where_langgraph_stores_nine(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn of the tutorial's agent (a message, a tool call held for approval, the approval,
    the tool, the answer) writes fewer checkpoints than LangGraph's (9), so ``useStream``'s
    read of the ten newest states reaches back past it; a Graph builder is served compiled."""
    import importlib.util
    import sys
    from pathlib import Path

    from langgraph_sdk import get_sync_client

    from ._serve_support import served

    monkeypatch.chdir(tmp_path)  # the agent's "mail server" writes outbox.json where it runs
    examples = Path(__file__).resolve().parents[2] / "examples"
    sys.path.insert(0, str(examples))
    try:
        spec = importlib.util.spec_from_file_location("served_agent", examples / "agent.py")
        assert spec is not None and spec.loader is not None
        agent = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(agent)
    finally:
        sys.path.remove(str(examples))
    with served(str(tmp_path / "a.db"), {"agent": agent.graph}) as url, get_sync_client(url=url, api_key=None) as sdk:
        c: Any = sdk
        thread = c.threads.create()["thread_id"]
        paused = c.runs.wait(thread, "agent", input=_say("email ann@example.com saying hello"))
        assert paused["__interrupt__"][0]["value"]["action_requests"][0]["args"]["to"] == "ann@example.com"
        c.runs.wait(thread, "agent", command={"resume": "yes"})
        history = c.threads.get_history(thread, limit=10)
    assert [h["metadata"]["source"] for h in reversed(history)] == ["update", "input", "loop", "loop", "loop", "loop"]
