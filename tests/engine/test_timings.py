"""A step checkpoint says how long each of its tasks took, in how many attempts, and who ran
it (what the Studio's timeline shows), including for a task that finished before a resume."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from plait import END, START, AppendList, Checkpointer, Graph, NodeError, RetryPolicy, StateSchema


def _schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).build()


def test_a_step_records_each_task_s_seconds_and_attempts(make_saver: Callable[..., Checkpointer]) -> None:
    calls = [0]

    def flaky(state: Any) -> Any:
        calls[0] += 1
        if calls[0] < 2:
            raise ConnectionError("flaky")
        return {"log": ["flaky"]}

    g = Graph(_schema())
    g.add_node("flaky", flaky, retry=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=0))
    g.add_node("steady", lambda s: {"log": ["steady"]})
    g.add_edge(START, "flaky").add_edge(START, "steady").add_edge("flaky", END).add_edge("steady", END)
    app = g.compile(make_saver())
    app.invoke({}, thread_id="t")
    head = app.get_state("t")
    timings = head.metadata["timings"]
    assert sorted(entry[0] for entry in timings) == ["flaky", "steady"]
    by_node = {node: (seconds, attempts) for node, seconds, attempts in timings}
    assert by_node["flaky"][1] == 2, "the retry shows as a second attempt"
    assert by_node["steady"][1] == 1
    assert all(isinstance(seconds, float) and seconds >= 0 for seconds, _ in by_node.values())
    assert by_node["flaky"][0] >= 0.001, "its retry's wait is part of its time"
    assert "owner" not in head.metadata, "nobody was named as the owner"
    inputs = next(h for h in app.get_state_history("t") if h.metadata["source"] == "input")
    assert "timings" not in inputs.metadata, "only steps that ran tasks have timings"


def test_a_named_owner_is_recorded_on_each_step(make_saver: Callable[..., Checkpointer]) -> None:
    g = Graph(_schema())
    g.add_node("a", lambda s: {"log": ["a"]}).add_node("b", lambda s: {"log": ["b"]})
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    app = g.compile(make_saver())
    app.invoke({}, thread_id="t", owner="worker-1/job-7")
    steps = [h for h in app.get_state_history("t") if h.metadata["source"] == "loop"]
    assert len(steps) == 2
    assert {h.metadata["owner"] for h in steps} == {"worker-1/job-7"}


def test_a_task_finished_before_a_resume_keeps_its_timing(make_saver: Callable[..., Checkpointer]) -> None:
    """``fast`` finishes in the step that ``broken`` fails; the resume does not run ``fast``
    again, and the step's checkpoint still says how long ``fast`` took (its saved result
    carries it)."""
    broken = [True]
    fast_done = threading.Event()

    def fast(state: Any) -> Any:
        fast_done.set()
        return {"log": ["fast"]}

    def fragile(state: Any) -> Any:
        fast_done.wait(5)
        if broken[0]:
            raise RuntimeError("down")
        return {"log": ["fragile"]}

    g = Graph(_schema())
    g.add_node("fast", fast).add_node("fragile", fragile)
    g.add_edge(START, "fast").add_edge(START, "fragile").add_edge("fast", END).add_edge("fragile", END)
    app = g.compile(make_saver())
    with pytest.raises(NodeError):
        app.invoke({}, thread_id="t")
    broken[0] = False
    fast_done.clear()
    app.invoke(None, thread_id="t")
    assert not fast_done.is_set(), "fast did not run again"
    timings = app.get_state("t").metadata["timings"]
    assert sorted(entry[0] for entry in timings) == ["fast", "fragile"]
    assert all(attempts == 1 for _, _, attempts in timings)
