"""Merging a step's writes: pure, no backend, no loop (STYLE §2)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait import AppendList, LastWriteWins, StateSchema
from plait.checkpoint.model import PendingWrite, Task
from plait.engine.merge import Results, StepInputs, error_write, merge_step, no_pending, read_pending, written_keys
from plait.errors import ConcurrentWriteError, NodeError
from plait.state.run_state import RunState


def _schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add("phase", LastWriteWins()).build()


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", node=f"n{i}") for i in range(n)]


def test_writes_merge_in_planned_task_order_whatever_order_they_finished_in() -> None:
    tasks = _tasks(3)
    finished_backwards: Results = {f"t{i}": ([("log", f"from n{i}")], []) for i in reversed(range(3))}
    state = RunState(_schema())
    changed = merge_step(state, tasks, finished_backwards, state.table, 0, frozenset({"phase"}))
    assert changed == {"log": ["from n0", "from n1", "from n2"]}
    assert state.get("log") == []  # merging returns the values; it applies nothing


@given(st.permutations(range(4)))
def test_the_merge_is_the_same_for_every_finishing_order(order: list[int]) -> None:
    tasks = _tasks(4)
    results: Results = {f"t{i}": ([("log", i), ("log", i * 10)], []) for i in order}
    state = RunState(_schema())
    assert merge_step(state, tasks, results, state.table, 0, frozenset())["log"] == [0, 0, 1, 10, 2, 20, 3, 30]


def test_two_tasks_writing_one_last_write_wins_channel_is_a_concurrent_write() -> None:
    tasks = _tasks(2)
    results: dict[str, Any] = {"t0": ([("phase", "a")], []), "t1": ([("phase", "b")], [])}
    state = RunState(_schema())
    with pytest.raises(ConcurrentWriteError) as info:
        merge_step(state, tasks, results, state.table, 7, frozenset({"phase"}))
    assert info.value.step == 7 and "phase" in str(info.value)


def test_one_task_writing_a_last_write_wins_channel_twice_keeps_the_last() -> None:
    tasks = _tasks(2)
    results: dict[str, Any] = {"t0": ([("phase", "a"), ("phase", "b")], []), "t1": ([], [])}
    state = RunState(_schema())
    assert merge_step(state, tasks, results, state.table, 0, frozenset({"phase"})) == {"phase": "b"}


def test_written_keys_names_each_channel_once_per_node_in_write_order() -> None:
    tasks = _tasks(2)
    results: dict[str, Any] = {"t0": ([("log", 1), ("phase", 2), ("log", 3)], []), "t1": ([], [])}
    assert written_keys(tasks, results) == {"n0": ["log", "phase"]}


def test_pending_writes_sort_into_results_effects_answers_and_breakpoints() -> None:
    pending = [
        PendingWrite(task_id="t0", kind="result", value={"w": [["log", "x"]], "r": []}),
        PendingWrite(task_id="t1", kind="effect", key="charge", value={"id": 9}),
        PendingWrite(task_id="t1", kind="resume", value=["yes"]),
        PendingWrite(task_id="", kind="breakpoint"),
    ]
    inputs = read_pending(pending, _schema())
    assert inputs.results["t0"][0] == [("log", "x")]
    assert inputs.effects == {"t1": {"charge": {"id": 9}}}
    assert inputs.resume == {"t1": ["yes"]}
    assert inputs.breakpoint_taken


def test_a_breakpoint_after_a_step_does_not_count_as_taken_before_the_next() -> None:
    assert not read_pending([PendingWrite(task_id="", kind="breakpoint", key="after")], _schema()).breakpoint_taken


def test_an_error_write_keeps_the_node_error_cause_and_its_traceback() -> None:
    try:
        try:
            raise ValueError("bad input")
        except ValueError as cause:
            raise NodeError("fetch", 3, "t", cause) from cause
    except NodeError as error:
        pw = error_write("t0", "fetch", 3, error)
    assert pw.kind == "error" and pw.task_id == "t0"
    assert pw.value["node"] == "fetch" and pw.value["step"] == 3
    assert pw.value["error"] == "NodeError" and pw.value["type"] == "builtins.ValueError"
    assert pw.value["message"] == "bad input" and "ValueError: bad input" in pw.value["traceback"]


def test_a_lone_task_folded_for_its_routers_is_merged_from_that_fold() -> None:
    rs = RunState(StateSchema.builder().add_lww("n").build())
    folded = {"n": 7}
    assert merge_step(rs, [Task(id="a", node="a")], {"a": ([("n", 1)], [])}, {}, 0, frozenset(), folded) is folded


def test_a_function_reducer_runs_once_per_write_even_when_a_router_reads_the_write() -> None:
    from plait import END, START, Graph

    calls: list[tuple[Any, Any]] = []

    def total(current: Any, incoming: Any) -> Any:
        calls.append((current, incoming))
        return (current or 0) + incoming

    g = Graph(StateSchema.builder().add("n", total).build())
    g.add_node("inc", lambda s: {"n": 1})
    g.add_edge(START, "inc")
    g.add_conditional_edges("inc", lambda s: "inc" if s["n"] < 5 else END)
    assert g.compile().invoke({"n": 0})["n"] == 5
    assert calls == [(None, 0), (0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]


def test_no_pending_is_a_fresh_empty_step_input_each_time() -> None:
    made = no_pending()
    assert made == StepInputs()
    made.results["x"] = ([], [])
    assert no_pending().results == {}
