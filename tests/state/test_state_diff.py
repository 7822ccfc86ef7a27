"""plait.state.diff: what changed between two snapshots or states."""

from __future__ import annotations

import pytest

from plait import AppendList, MergeMap, RunState, StateDiff, StateSchema, diff
from plait.state import Change


def _schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww("phase").add_lww("x").add("m", MergeMap()).build()


def test_diff_between_snapshots_lists_added_removed_and_changed_keys() -> None:
    st = RunState(_schema())
    st.merge_writes([("phase", "plan"), ("x", 1)])
    a = st.snapshot("a")
    later = RunState.from_snapshot(_schema(), {"log": ["one"], "phase": "act", "m": {}}, super_step=1)
    b = later.snapshot("b")
    d = diff(a, b)
    assert d.added == {}
    assert d.removed == {"x": 1}
    assert d.changed == (
        Change(key="log", before=[], after=["one"]),
        Change(key="phase", before="plan", after="act"),
    )
    assert d.keys == ("log", "phase", "x")
    assert d


def test_diff_between_states_and_in_reverse() -> None:
    a, b = RunState(_schema()), RunState(_schema())
    b.write("phase", "new")
    b.write("m", {"k": [1]})
    forward, backward = diff(a, b), diff(b, a)
    assert forward.added == {"phase": "new"} and backward.removed == {"phase": "new"}
    assert forward.changed == (Change(key="m", before={}, after={"k": [1]}),)
    assert backward.changed == (Change(key="m", before={"k": [1]}, after={}),)


def test_equal_states_have_an_empty_falsy_diff() -> None:
    a, b = RunState(_schema()), RunState(_schema())
    for st in (a, b):
        st.write("m", {"z": 1, "a": 2})
    b.advance()
    d = diff(a, b)
    assert not d and d == StateDiff() and d.keys == ()
    assert not diff(a.snapshot(), a)


def test_values_python_calls_equal_but_json_does_not_are_a_change() -> None:
    cases = [(1, True), (1, 1.0), (0.0, -0.0), ([1], [True]), ({"k": 0}, {"k": False})]
    for before, after in cases:
        d = diff({"x": before}, {"x": after})
        assert d.changed == (Change(key="x", before=before, after=after),), (before, after)


def test_diff_of_plain_mappings_and_to_json() -> None:
    d = diff({"a": 1, "b": [1]}, {"b": [1, 2], "c": None})
    assert d.to_json() == {
        "added": {"c": None},
        "removed": {"a": 1},
        "changed": [{"key": "b", "before": [1], "after": [1, 2]}],
    }


def test_diff_reads_any_record_with_a_values_mapping() -> None:
    class Checkpointish:
        values = {"phase": "x"}

    d = diff(Checkpointish(), {"phase": "y"})  # type: ignore[arg-type]
    assert d.changed == (Change(key="phase", before="x", after="y"),)


def test_non_json_plain_mappings_fall_back_to_python_equality() -> None:
    marker = object()
    assert not diff({"a": marker}, {"a": marker})
    assert diff({"a": {1}}, {"a": {2}}).keys == ("a",)
    assert not diff({"a": {1}}, {"a": {1}})


@pytest.mark.parametrize("field", ["added", "removed", "changed"])
def test_state_diff_is_frozen(field: str) -> None:
    with pytest.raises(AttributeError):
        setattr(StateDiff(), field, {})
