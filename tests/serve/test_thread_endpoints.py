"""A thread's stream (``threads.join_stream``), breakpoints at every node (``"*"``) and the
refused ``PATCH /threads/{id}/state``, driven by the unmodified ``langgraph-sdk`` client on
SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from ._serve_support import ENTERED


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _until_done(parts: Iterator[Any]) -> list[Any]:
    """The parts of one run's share of a thread stream, up to and with its ``run_done``."""
    read = []
    for part in parts:
        read.append(part)
        if part.event == "run_done":
            return read
    raise AssertionError(f"the stream ended before a run_done: {read}")


def test_a_thread_stream_sends_each_run_as_it_happens_then_resumes_after_an_id(
    client: Any, gate: threading.Event
) -> None:
    thread = client.threads.create()["thread_id"]
    first = client.runs.create(thread, "chat", input=_say("hold"), stream_mode=["values", "messages-tuple"])
    assert ENTERED["hold"].wait(30)
    stream = iter(client.threads.join_stream(thread))
    head = next(stream)  # read while the run is held in its first node
    assert (head.event, head.data["run_id"], head.id) == ("metadata", first["run_id"], f"{first['run_id']}:1")
    gate.set()
    one = [head, *_until_done(stream)]
    assert {"metadata", "values", "messages", "run_done"} <= {p.event for p in one}
    assert one[-1].data == {"run_id": first["run_id"], "thread_id": thread, "status": "success"}
    assert one[-1].id == f"{first['run_id']}:done"
    assert one[-2].event == "values" and one[-2].data["messages"][-1]["content"] == "echo: hold"

    second = client.runs.create(thread, "chat", input=_say("more"))  # made while the stream is open
    two = _until_done(stream)
    assert (two[0].event, two[0].data["run_id"]) == ("metadata", second["run_id"])
    assert two[-1].data["status"] == "success"
    assert two[-2].data["messages"][-1]["content"] == "echo: more"

    # a client that comes back with the id of an event it read gets every later event once
    middle = one[2]
    again = iter(client.threads.join_stream(thread, last_event_id=middle.id))
    resumed = _until_done(again) + _until_done(again)
    assert [(p.event, p.id) for p in resumed] == [(p.event, p.id) for p in one[3:] + two]
    after_end = iter(client.threads.join_stream(thread, last_event_id=one[-1].id))
    assert [p.id for p in _until_done(after_end)] == [p.id for p in two]


def test_a_thread_stream_in_lifecycle_mode_sends_only_starts_and_ends(client: Any, gate: threading.Event) -> None:
    thread = client.threads.create()["thread_id"]
    run = client.runs.create(thread, "chat", input=_say("hold"))
    assert ENTERED["hold"].wait(30)
    stream = iter(client.threads.join_stream(thread, stream_mode="lifecycle"))
    started = next(stream)
    assert (started.event, started.data) == (
        "run_start", {"run_id": run["run_id"], "thread_id": thread, "assistant_id": run["assistant_id"]}
    )  # fmt: skip
    assert started.id == f"{run['run_id']}:0"
    gate.set()
    ended = _until_done(stream)
    assert [p.event for p in ended] == ["run_done"]
    after_start = iter(
        client.threads.join_stream(thread, stream_mode=["lifecycle", "run_modes"], last_event_id=started.id)
    )
    assert [p.event for p in _until_done(after_start)][0] == "metadata"  # its run_start is not sent again
    # both modes, resumed after that run's end: the next run, made after the join or not
    both = iter(client.threads.join_stream(thread, stream_mode=["lifecycle", "run_modes"], last_event_id=ended[-1].id))
    client.runs.create(thread, "chat", input=_say("again"))
    events = [p.event for p in _until_done(both)]
    assert events[:2] == ["run_start", "metadata"] and events[-1] == "run_done"


def test_a_thread_stream_ends_when_its_thread_is_deleted(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    run = client.runs.wait(thread, "chat", input=_say("hi"))
    last = client.runs.list(thread)[0]["run_id"]
    stream = iter(client.threads.join_stream(thread, last_event_id=f"{last}:1"))
    assert [p.event for p in _until_done(stream)][-1] == "run_done"  # the stream is open, waiting
    client.threads.delete(thread)
    assert list(stream) == []
    assert run["messages"][-1]["content"] == "echo: hi"


def test_a_thread_stream_refuses_what_it_cannot_serve(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    with pytest.raises(NotFoundError):
        next(iter(client.threads.join_stream("nobody")))
    with pytest.raises(UnprocessableEntityError, match="state_update"):
        next(iter(client.threads.join_stream(thread, stream_mode="state_update")))
    with pytest.raises(UnprocessableEntityError, match="Last-Event-ID"):
        next(iter(client.threads.join_stream(thread, last_event_id="17")))
    with pytest.raises(UnprocessableEntityError, match="names no run"):
        next(iter(client.threads.join_stream(thread, last_event_id="other-run:3")))


@pytest.mark.parametrize("where", ["interrupt_before", "interrupt_after"])
def test_breakpoints_at_every_node_pause_the_run_at_each_node(client: Any, where: str) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("hi"), **{where: "*"})
    order = ["gate", "reply"]
    paused_at = []
    for _ in range(4):
        state = client.threads.get_state(thread)
        if not state["next"]:
            break
        paused_at.append(state["next"][0])
        client.runs.wait(thread, "chat", input=None, **{where: "*"})
    expected = order if where == "interrupt_before" else order[1:]
    assert paused_at == expected
    assert client.threads.get_state(thread)["values"]["messages"][-1]["content"] == "echo: hi"


def test_a_checkpoints_metadata_is_not_edited_in_place(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "chat", input=_say("hi"))
    before = client.threads.get_state(thread)
    with pytest.raises(ConflictError, match="never rewrites a stored checkpoint") as refused:
        client.http.patch(f"/threads/{thread}/state", json={"metadata": {"reviewed": True}})
    assert "threads.update" in str(refused.value) or "PATCH /threads/" in str(refused.value)
    assert client.threads.get_state(thread) == before
    with pytest.raises(NotFoundError):
        client.http.patch("/threads/nobody/state", json={"metadata": {}})
