"""The stream modes that need more than a run's own items, through the unmodified
``langgraph-sdk`` client, on SQLite (the server runs the run) and on PostgreSQL (a worker of
the run queue stores the events, the server reads them back): the same events both ways.
``nested`` is ``inner`` (a subgraph: ``a`` -> ``b``) -> ``fin``, each adding 1 to ``n``."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from langgraph_sdk.errors import NotFoundError


def _names(parts: list[Any]) -> list[str]:
    """The events' names, a subgraph's task id written ``*``."""
    return [re.sub(r":[0-9a-f]+", ":*", p.event) for p in parts]


def test_stream_subgraphs_sends_a_subgraphs_events_named_by_its_namespace(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    parts = list(
        client.runs.stream(thread, "nested", input={"n": 0}, stream_mode=["values", "updates"], stream_subgraphs=True)
    )
    assert _names(parts) == [
        "metadata", "values",
        "values|inner:*", "updates|inner:*", "values|inner:*", "updates|inner:*", "values|inner:*",
        "updates", "values", "updates", "values",
    ]  # fmt: skip
    inner = [p for p in parts if "|" in p.event]
    (namespace,) = {p.event.split("|", 1)[1] for p in inner}
    task = client.threads.get_history(thread, limit=10)[-2]["tasks"][0]
    assert namespace == f"inner:{task['id']}" and task["name"] == "inner"
    assert [p.data for p in inner] == [{"n": 0}, {"a": {"n": 1}}, {"n": 1}, {"b": {"n": 1}}, {"n": 2}]
    assert [p.data for p in parts if p.event == "updates"] == [{"inner": {"n": 2}}, {"fin": {"n": 1}}]
    plain = list(client.runs.stream(thread, "nested", input={"n": 0}, stream_mode=["values", "updates"]))
    assert _names(plain) == ["metadata", "values", "updates", "values", "updates", "values"]


def test_checkpoints_and_debug_send_each_stored_state_and_task(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    parts = list(client.runs.stream(thread, "nested", input={"n": 0}, stream_mode=["checkpoints", "debug"]))
    shown = [p.event if p.event != "debug" else f"debug:{p.data['type']}" for p in parts]
    assert shown == [
        "metadata",
        "checkpoints", "debug:checkpoint",  # the new thread's root (LangGraph's step -1)
        "checkpoints", "debug:checkpoint", "debug:task", "debug:task_result",
        "checkpoints", "debug:checkpoint", "debug:task", "debug:task_result",
        "checkpoints", "debug:checkpoint",
    ]  # fmt: skip
    saved = [p.data for p in parts if p.event == "checkpoints"]
    assert [(c["values"], c["next"]) for c in saved] == [
        ({"n": 0}, []),
        ({"n": 0}, ["inner"]),
        ({"n": 2}, ["fin"]),
        ({"n": 3}, []),
    ]
    assert saved[0]["parent_config"] is None and saved[0]["metadata"]["source"] == "update"
    assert all(c["config"]["configurable"]["thread_id"] == thread for c in saved)
    assert [c["parent_config"] for c in saved[1:]] == [c["config"] for c in saved[:-1]]
    history = client.threads.get_history(thread, limit=10)
    assert [c["checkpoint"] for c in saved] == [h["checkpoint"] for h in reversed(history)]
    assert [c["config"]["configurable"]["checkpoint_id"] for c in saved] == [
        h["checkpoint"]["checkpoint_id"] for h in reversed(history)
    ]
    debug = [p.data for p in parts if p.event == "debug"]
    stamps = [datetime.datetime.fromisoformat(d["timestamp"]) for d in debug]
    assert stamps == sorted(stamps)  # each made when its checkpoint or task came
    assert [d["payload"] for d in debug if d["type"] == "checkpoint"] == saved
    results = [d for d in debug if d["type"] == "task_result"]
    assert [(d["payload"]["name"], d["step"], d["payload"]["result"]) for d in results] == [
        ("inner", 1, [["n", 2]]),
        ("fin", 2, [["n", 1]]),
    ]


def test_a_subgraphs_checkpoints_are_sent_with_stream_subgraphs(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    parts = list(
        client.runs.stream(thread, "nested", input={"n": 0}, stream_mode=["checkpoints"], stream_subgraphs=True)
    )
    assert _names(parts) == [
        "metadata", "checkpoints", "checkpoints",
        "checkpoints|inner:*", "checkpoints|inner:*", "checkpoints|inner:*",
        "checkpoints", "checkpoints",
    ]  # fmt: skip
    inner = [p.data for p in parts if p.event.startswith("checkpoints|")]
    assert [c["values"] for c in inner] == [{"n": 0}, {"n": 1}, {"n": 2}]
    namespace = parts[3].event.split("|", 1)[1]
    assert {c["config"]["configurable"]["checkpoint_ns"] for c in inner} == {namespace}


def test_a_stateless_runs_thread_is_deleted_once_it_ended(client: Any) -> None:
    parts = list(client.runs.stream(None, "nested", input={"n": 0}, stream_mode=["checkpoints"]))
    thread = parts[-1].data["config"]["configurable"]["thread_id"]
    with pytest.raises(NotFoundError):
        client.threads.get(thread)
    with pytest.raises(NotFoundError):
        client.threads.get_state(thread)
    run = client.runs.create(None, "nested", input={"n": 0})
    assert client.runs.join(run["thread_id"], run["run_id"]) == {"n": 3}
    assert client.runs.get(run["thread_id"], run["run_id"])["status"] == "success"  # the run stays readable
    with pytest.raises(NotFoundError):
        client.threads.get(run["thread_id"])
    assert client.threads.search() == []
    kept = list(client.runs.stream(None, "nested", input={"n": 0}, stream_mode=["checkpoints"], on_completion="keep"))
    assert client.threads.get(kept[-1].data["config"]["configurable"]["thread_id"])["values"] == {"n": 3}
