"""plait.state.run_state: the versioned working memory of a run."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from typing import Annotated, Any, TypedDict

import pytest

from plait import (
    AppendList,
    AppendMessages,
    InvalidUpdateError,
    MaxByTimestamp,
    MergeMap,
    MessageNotFoundError,
    MissingValueError,
    NotSerializableError,
    PlaitError,
    ReadOnlyStateError,
    ReducerError,
    RunState,
    StateError,
    StateSchema,
    StateSnapshot,
    StateUpdated,
    Sum,
    UnknownChannelError,
    remove_message,
    thaw,
)
from plait._codec import fingerprint


def make_schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add("messages", AppendMessages())
        .add_lww("phase")
        .add("counter", Sum())
        .add("log", AppendList())
        .add("meta", MergeMap())
        .add("latest", MaxByTimestamp())
        .add("picky", _picky)
        .build()
    )


def _picky(current: Any, incoming: Any) -> Any:
    if incoming == "boom":
        raise ValueError("picky refuses boom")
    return incoming


@pytest.fixture
def state() -> RunState:
    st = RunState(make_schema())
    st.merge_writes([("messages", {"id": "m1", "text": "hi"}), ("phase", "plan"), ("latest", {"ts_ms": 10})])
    st.advance()
    st.snapshot("after plan")
    return st


# -- reading and writing --------------------------------------------------------------------


def test_a_fresh_state_holds_the_defaults_at_version_zero() -> None:
    st = RunState(make_schema())
    assert st.version == 0 and st.super_step == 0
    assert st.keys() == ["messages", "counter", "log", "meta"]
    assert st.to_dict() == {"messages": [], "counter": 0, "log": [], "meta": {}}
    assert st.history == ()
    assert st.channel_version("counter") == 0


def test_write_folds_through_the_reducer_and_bumps_the_version() -> None:
    st = RunState(make_schema())
    st.write("counter", 2)
    st.write("counter", 3)
    st.write("phase", "plan")
    st.write("phase", "act")
    assert st["counter"] == 5 and st.read("phase") == "act"
    assert st.version == 4
    assert st.channel_version("counter") == 2
    assert st.channel_version("phase") == 4
    assert st.channel_version("log") == 0
    assert st.channel_versions == {"counter": 2, "phase": 4}


def test_merge_writes_folds_in_the_given_order_as_one_change() -> None:
    st = RunState(make_schema())
    st.merge_writes([("log", "a"), ("phase", "x"), ("log", ["b", "c"]), ("phase", "y"), ("counter", 1)])
    assert st["log"] == ["a", "b", "c"]
    assert st["phase"] == "y"
    assert st.version == 1
    assert {k: st.channel_version(k) for k in ("log", "phase", "counter", "meta")} == {
        "log": 1,
        "phase": 1,
        "counter": 1,
        "meta": 0,
    }


def test_an_empty_batch_is_not_a_change() -> None:
    st = RunState(make_schema())
    events: list[StateUpdated] = []
    st.subscribe(events.append)
    st.merge_writes([])
    assert st.version == 0 and events == []


def test_get_returns_the_default_for_absent_or_undeclared_keys() -> None:
    st = RunState(make_schema())
    assert st.get("phase") is None
    assert st.get("phase", "idle") == "idle"
    assert st.get("not a channel", 7) == 7
    st.write("phase", "run")
    assert st.get("phase", "idle") == "run"
    assert "phase" in st and "nope" not in st
    assert list(st) == st.keys()


def test_a_missing_value_is_a_key_error_that_lists_what_exists() -> None:
    st = RunState(make_schema())
    st.writers = {"phase": ("planner", "router")}
    with pytest.raises(KeyError) as info:
        st["phase"]
    err = info.value
    assert isinstance(err, MissingValueError) and isinstance(err, StateError)
    assert err.key == "phase" and err.declared
    assert err.present == ("messages", "counter", "log", "meta")
    assert err.writers == ("planner", "router")
    msg = str(err)
    assert "'phase' has no value yet" in msg and "'planner'" in msg and "'counter'" in msg
    assert "state.get('phase', default)" in msg


def test_reading_an_undeclared_key_says_it_is_not_a_channel() -> None:
    st = RunState(make_schema())
    with pytest.raises(MissingValueError) as info:
        st.read("missing")
    assert not info.value.declared
    assert "'missing' is not a channel of this schema" in str(info.value)
    assert info.value.channels == make_schema().keys
    assert all(repr(key) in str(info.value) for key in make_schema().keys), "the channels are named"


def test_advance_moves_the_super_step_without_changing_the_version() -> None:
    st = RunState(make_schema())
    assert st.advance() == 1 and st.advance() == 2
    assert st.super_step == 2 and st.version == 0


def test_channel_version_of_an_unknown_key_is_unknown_channel() -> None:
    with pytest.raises(UnknownChannelError):
        RunState(make_schema()).channel_version("nope")


class LogState(TypedDict):
    log: Annotated[list[str], AppendList()]


def test_a_schema_may_be_given_as_a_typed_dict() -> None:
    st = RunState(LogState)
    st.write("log", "x")
    assert st["log"] == ["x"]


def test_repr_names_version_step_and_keys() -> None:
    st = RunState(make_schema())
    assert repr(st) == "RunState(version=0, super_step=0, keys=['messages', 'counter', 'log', 'meta'])"


# -- events ---------------------------------------------------------------------------------


def test_every_change_emits_state_updated() -> None:
    st = RunState(make_schema())
    events: list[StateUpdated] = []
    st.subscribe(events.append)
    st.write("phase", "plan", node="planner")
    st.advance()
    st.merge_writes([("log", "a"), ("counter", 1), ("log", "b")], node="worker")
    assert events == [
        StateUpdated(keys=("phase",), version=1, super_step=0, node="planner"),
        StateUpdated(keys=("log", "counter"), version=2, super_step=1, node="worker"),
    ]
    with pytest.raises(FrozenInstanceError):
        events[0].version = 9  # type: ignore[misc]


def test_unsubscribe_stops_events_and_is_idempotent() -> None:
    st = RunState(make_schema())
    seen: list[int] = []
    other: list[int] = []
    unsubscribe = st.subscribe(lambda e: seen.append(e.version))
    st.subscribe(lambda e: other.append(e.version))
    st.write("counter", 1)
    unsubscribe()
    unsubscribe()
    st.write("counter", 1)
    assert seen == [1] and other == [1, 2]


def test_subscribers_see_the_state_already_changed() -> None:
    st = RunState(make_schema())
    seen: list[Any] = []
    st.subscribe(lambda e: seen.append((st.version, st["counter"])))
    st.write("counter", 4)
    assert seen == [(1, 4)]


# -- snapshots, history, from_snapshot, fingerprint ------------------------------------------


def test_snapshot_is_an_immutable_picture(state: RunState) -> None:
    snap = state.history[-1]
    assert isinstance(snap, StateSnapshot)
    assert (snap.version, snap.super_step, snap.label) == (1, 1, "after plan")
    assert snap.fingerprint == state.fingerprint == fingerprint(snap.values)
    state.write("messages", {"id": "m2", "text": "later"})
    state.write("phase", "act")
    assert snap.values["phase"] == "plan"
    assert [m["id"] for m in snap.values["messages"]] == ["m1"]
    assert snap.fingerprint != state.fingerprint
    with pytest.raises(ReadOnlyStateError):
        snap.values["phase"] = "hacked"  # type: ignore[index]
    with pytest.raises(ReadOnlyStateError):
        snap.values["messages"].append({"id": "x"})
    with pytest.raises(FrozenInstanceError):
        snap.label = "renamed"  # type: ignore[misc]


def test_history_lists_snapshots_oldest_first_and_cannot_be_edited(state: RunState) -> None:
    state.write("counter", 1)
    second = state.snapshot()
    assert [s.label for s in state.history] == ["after plan", ""]
    assert state.history[-1] is second and second.version == 2
    history = state.history
    assert isinstance(history, tuple)
    assert len(state.history) == 2


def test_from_snapshot_round_trips(state: RunState) -> None:
    state.write("meta", {"k": {"deep": [1, 2]}})
    snap = state.snapshot("x")
    restored = RunState.from_snapshot(state.schema, snap.values, snap.super_step)
    assert restored.values == snap.values
    assert restored.fingerprint == snap.fingerprint
    assert restored.super_step == snap.super_step == 1
    assert restored.snapshot().fingerprint == snap.fingerprint
    restored.write("messages", {"id": "m1", "text": "edited"})
    assert restored["messages"] == [{"id": "m1", "text": "edited"}]  # the restored history still upserts
    assert state["messages"] == [{"id": "m1", "text": "hi"}]  # and the original is untouched


def test_from_snapshot_fills_missing_channels_from_defaults_and_refuses_unknown_ones() -> None:
    restored = RunState.from_snapshot(make_schema(), {"phase": "x"}, super_step=3)
    assert restored.to_dict() == {"messages": [], "counter": 0, "log": [], "meta": {}, "phase": "x"}
    with pytest.raises(UnknownChannelError):
        RunState.from_snapshot(make_schema(), {"bogus": 1}, super_step=0)


def test_from_snapshot_gives_ids_to_restored_messages_without_one() -> None:
    restored = RunState.from_snapshot(make_schema(), {"messages": [{"text": "old"}]}, super_step=0)
    restored.write("messages", {"id": "n", "text": "new"})
    assert [m["text"] for m in restored["messages"]] == ["old", "new"]
    assert all(m["id"] for m in restored["messages"])


def test_fingerprint_is_of_the_values_only() -> None:
    a, b = RunState(make_schema()), RunState(make_schema())
    a.write("counter", 1)
    a.write("counter", 1)
    b.advance()
    b.write("counter", 2)
    assert a.version != b.version and a.super_step != b.super_step
    assert a.fingerprint == b.fingerprint
    b.write("counter", 0.0)  # 2 + 0.0 is the float 2.0: different JSON
    assert a.fingerprint != b.fingerprint


def test_fingerprint_follows_the_version() -> None:
    st = RunState(make_schema())
    before = st.fingerprint
    st.write("phase", "x")
    assert st.fingerprint != before
    assert st.fingerprint == fingerprint(st.to_dict())


# -- mutation safety ------------------------------------------------------------------------


def test_a_value_read_from_state_cannot_be_mutated(state: RunState) -> None:
    fp, version = state.fingerprint, state.version
    messages = state.read("messages")
    with pytest.raises(ReadOnlyStateError):
        messages.append({"id": "sneaky"})
    with pytest.raises(ReadOnlyStateError):
        messages[0]["text"] = "changed"
    with pytest.raises(ReadOnlyStateError):
        state["latest"]["ts_ms"] = 0
    assert state["messages"] == [{"id": "m1", "text": "hi"}]
    assert state.history[-1].values["messages"] == [{"id": "m1", "text": "hi"}]
    assert state.fingerprint == fp and state.version == version


def test_values_view_cannot_be_used_to_change_state(state: RunState) -> None:
    version, fp = state.version, state.fingerprint
    with pytest.raises(ReadOnlyStateError):
        state.values["phase"] = "hacked"  # type: ignore[index]
    versions = state.channel_versions
    versions["phase"] = 99  # type: ignore[index]
    assert state["phase"] == "plan" and state.channel_version("phase") == 1
    assert state.version == version and state.fingerprint == fp


def test_mutating_an_object_after_writing_it_does_not_change_state() -> None:
    st = RunState(make_schema())
    mine = [{"id": "a", "tags": ["x"]}]
    cfg = {"depth": 1, "nested": {"k": [1]}}
    st.merge_writes([("messages", mine), ("meta", cfg), ("phase", cfg)])
    snap = st.snapshot()
    fp = st.fingerprint
    mine.append({"id": "b"})
    mine[0]["tags"].append("y")  # type: ignore[attr-defined]
    cfg["depth"] = 2
    cfg["nested"]["k"].append(2)  # type: ignore[index]
    assert st["messages"] == [{"id": "a", "tags": ["x"]}]
    assert st["meta"] == {"depth": 1, "nested": {"k": [1]}}
    assert st["phase"] == {"depth": 1, "nested": {"k": [1]}}
    assert snap.values["meta"] == {"depth": 1, "nested": {"k": [1]}}
    assert st.fingerprint == fp == snap.fingerprint


def test_to_dict_is_a_mutable_copy_that_does_not_reach_state(state: RunState) -> None:
    data = state.to_dict()
    data["messages"].append({"id": "mine"})
    data["messages"][0]["text"] = "changed"
    data["phase"] = "changed"
    assert state["messages"] == [{"id": "m1", "text": "hi"}] and state["phase"] == "plan"


def test_thaw_a_read_value_change_it_and_write_it_back(state: RunState) -> None:
    latest = thaw(state["latest"])
    latest["ts_ms"] = 20
    latest["v"] = "new"
    state.write("latest", latest)
    assert state["latest"] == {"ts_ms": 20, "v": "new"}


def test_writing_back_a_value_read_from_state_is_fine(state: RunState) -> None:
    state.write("phase", state["messages"])
    assert state["phase"] is state["messages"]  # frozen values are shared, never copied
    state.write("log", state["messages"])
    assert state["log"] == [{"id": "m1", "text": "hi"}]


# -- refused writes change nothing ----------------------------------------------------------


def _capture(st: RunState) -> tuple[Any, ...]:
    return (
        st.to_dict(),
        st.version,
        st.super_step,
        dict(st.channel_versions),
        st.history,
        st.fingerprint,
        st.keys(),
    )


BAD_WRITES: dict[str, tuple[tuple[str, Any], type[PlaitError], dict[str, Any]]] = {
    "unknown channel": (("mesages", {"text": "x"}), UnknownChannelError, {"channel": "mesages"}),
    "not json": (("meta", {"when": dt.datetime(2024, 1, 1)}), NotSerializableError, {"path": "meta.when"}),
    "nan": (("counter", float("nan")), NotSerializableError, {"channel": "counter"}),
    "max by timestamp without field": (("latest", {"v": 1}), InvalidUpdateError, {"channel": "latest"}),
    "not a message": (("messages", ["plain text"]), InvalidUpdateError, {"channel": "messages"}),
    "remove unknown message": (("messages", remove_message("zzz")), MessageNotFoundError, {"message_id": "zzz"}),
    "merge map of a list": (("meta", [1]), InvalidUpdateError, {"channel": "meta"}),
    "sum of a str": (("counter", "3"), InvalidUpdateError, {"channel": "counter"}),
    "sum overflow": (("counter", 2**64 - 1), InvalidUpdateError, {"channel": "counter"}),
    "reducer raises": (("picky", "boom"), ReducerError, {"channel": "picky"}),
}


@pytest.mark.parametrize("case", sorted(BAD_WRITES))
@pytest.mark.parametrize("how", ["write", "batch, bad write last", "batch, bad write first"])
def test_a_refused_write_changes_nothing(state: RunState, case: str, how: str) -> None:
    bad, error, attrs = BAD_WRITES[case]
    state.write("counter", 5)  # so "sum overflow" overflows
    state.write("picky", "fine")
    events: list[StateUpdated] = []
    state.subscribe(events.append)
    before = _capture(state)
    good = [("log", "ok"), ("messages", {"id": "m2"}), ("meta", {"k": 1}), ("counter", 1), ("picky", "ok")]
    with pytest.raises(error) as info:
        if how == "write":
            state.write(*bad, node="n1")
        elif how == "batch, bad write last":
            state.merge_writes([*good, bad], node="n1")
        else:
            state.merge_writes([bad, *good], node="n1")
    for name, value in attrs.items():
        assert getattr(info.value, name) == value
    if hasattr(info.value, "node"):
        assert info.value.node == "n1"
    assert _capture(state) == before
    assert events == []
    state.write("log", "still works")
    assert state.version == before[1] + 1


def test_reducer_error_names_the_channel_and_chains_the_cause(state: RunState) -> None:
    state.write("picky", "first")  # a first write is taken as is; the reducer runs from the second
    with pytest.raises(ReducerError) as info:
        state.write("picky", "boom", node="worker")
    err = info.value
    assert isinstance(err.__cause__, ValueError)
    assert err.channel == "picky" and err.node == "worker" and err.reducer.endswith("_picky")
    msg = str(err)
    assert "'picky'" in msg and "ValueError: picky refuses boom" in msg and "'worker'" in msg


def test_unknown_channel_error_lists_the_known_keys(state: RunState) -> None:
    with pytest.raises(UnknownChannelError) as info:
        state.write("mesages", [])
    assert info.value.known == make_schema().keys
    assert "'messages'" in str(info.value) and "'picky'" in str(info.value)


def test_a_custom_reducer_returning_non_json_is_refused() -> None:
    schema = StateSchema.builder().add("x", lambda a, b: {b}).build()
    st = RunState(schema)
    with pytest.raises(NotSerializableError) as info:
        st.write("x", 1)  # the first write goes through the reducer too
    assert info.value.channel == "x"
    assert "x" not in st and st.version == 0


def test_a_subscriber_that_raises_does_not_undo_the_change() -> None:
    st = RunState(make_schema())

    def broken(event: StateUpdated) -> None:
        raise RuntimeError("subscriber bug")

    st.subscribe(broken)
    with pytest.raises(RuntimeError):
        st.write("counter", 1)
    assert st["counter"] == 1 and st.version == 1


@pytest.mark.parametrize("reader", [lambda s: s.values, lambda s: s.to_dict()])
def test_value_views_include_every_key_with_a_value(state: RunState, reader: Callable[[RunState], Any]) -> None:
    assert set(reader(state)) == set(state.keys())
