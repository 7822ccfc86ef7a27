"""plait.state.reducers: each built-in reducer, callables as reducers, and their refusals."""

from __future__ import annotations

import functools
import operator
import subprocess
import sys
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait import (
    END,
    START,
    AppendList,
    AppendMessages,
    Graph,
    InvalidUpdateError,
    LastWriteWins,
    MaxByTimestamp,
    MergeMap,
    MessageNotFoundError,
    ReadOnlyStateError,
    Reducer,
    ReducerError,
    RunState,
    StateSchema,
    Sum,
    message_id,
    remove_message,
)
from plait._codec import freeze
from plait._frozen import FrozenDict, FrozenList
from plait.state.reducers import NO_DEFAULT, CallableReducer, as_reducer


def fold(reducer: Reducer, *writes: Any, start: Any = NO_DEFAULT) -> Any:
    """Fold writes like RunState does: frozen incoming values, first() on an empty channel."""
    current = reducer.default() if start is NO_DEFAULT else freeze(start, "ch")
    for raw in writes:
        incoming = freeze(raw, "ch")
        current = reducer.first(incoming, "ch") if current is NO_DEFAULT else reducer.reduce(current, incoming, "ch")
    return current


# -- LastWriteWins ------------------------------------------------------------------------


def test_last_write_wins_keeps_the_newest_value_of_any_json_type() -> None:
    lww = LastWriteWins()
    assert lww.default() is NO_DEFAULT
    assert fold(lww, 1, "two", [3]) == [3]
    assert fold(lww, {"a": 1}, None) is None
    assert not lww.incremental


# -- AppendList ---------------------------------------------------------------------------


def test_append_list_extends_with_lists_and_appends_single_items() -> None:
    assert fold(AppendList(), "a", ["b", "c"], 4, {"d": 1}) == ["a", "b", "c", 4, {"d": 1}]


def test_append_list_appends_a_wrapped_list_as_one_item() -> None:
    assert fold(AppendList(), [[1, 2]], [3]) == [[1, 2], 3]


def test_append_list_treats_tuples_as_lists() -> None:
    assert fold(AppendList(), (1, 2)) == [1, 2]


def test_append_list_starts_empty_and_never_changes_its_input() -> None:
    reducer = AppendList()
    start = reducer.default()
    assert start == [] and type(start) is FrozenList
    current = freeze([1], "ch")
    out = reducer.reduce(current, freeze([2], "ch"), "ch")
    assert current == [1] and out == [1, 2]
    assert type(out) is FrozenList
    assert reducer.incremental


# -- AppendMessages -----------------------------------------------------------------------


def test_append_messages_appends_new_ids_in_order() -> None:
    out = fold(AppendMessages(), {"id": "1", "text": "hi"}, [{"id": "2", "text": "a"}, {"id": "3", "text": "b"}])
    assert [m["id"] for m in out] == ["1", "2", "3"]


def test_append_messages_upserts_same_id_in_place() -> None:
    out = fold(
        AppendMessages(),
        [{"id": "1", "text": "a"}, {"id": "2", "text": "b"}, {"id": "3", "text": "c"}],
        {"id": "2", "text": "B", "edited": True},
    )
    assert out == [{"id": "1", "text": "a"}, {"id": "2", "text": "B", "edited": True}, {"id": "3", "text": "c"}]


def test_append_messages_upsert_and_append_within_one_write() -> None:
    out = fold(
        AppendMessages(),
        [{"id": "1", "v": 0}],
        [{"id": "2", "v": 0}, {"id": "1", "v": 1}, {"id": "2", "v": 2}],
    )
    assert out == [{"id": "1", "v": 1}, {"id": "2", "v": 2}]


def test_a_message_id_comes_from_the_write_and_the_position_never_the_content() -> None:
    assert message_id("task-1", 0).startswith("msg-")
    assert message_id("task-1", 0) == message_id("task-1", 0), "a re-run of the task names alike"
    assert len({message_id("task-1", 0), message_id("task-1", 1), message_id("task-2", 0)}) == 3


@settings(max_examples=100, deadline=None, database=None)
@given(st.text(max_size=8), st.integers(0, 1000), st.text(max_size=8), st.integers(0, 1000))
def test_message_ids_differ_between_positions_and_between_writes(s1: str, p1: int, s2: str, p2: int) -> None:
    assert (message_id(s1, p1) == message_id(s2, p2)) == ((s1, p1) == (s2, p2))


def test_message_id_is_the_same_in_another_process() -> None:
    code = "import sys; from plait import message_id; print(message_id(sys.argv[1], 3))"
    out = subprocess.run([sys.executable, "-c", code, "tâsk ✓"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == message_id("tâsk ✓", 3)


def test_assign_ids_names_each_message_without_one_by_its_position() -> None:
    yes = {"role": "user", "content": "yes"}
    write = freeze([yes, {"id": "kept", "content": "x"}, yes, remove_message("old"), {"id": None, **yes}], "ch")
    named, after = AppendMessages().assign_ids(write, "task", 10)
    assert after == 15
    assert [m.get("id") for m in named] == [
        message_id("task", 10),
        "kept",
        message_id("task", 12),
        None,  # a removal marker is not a message
        message_id("task", 14),
    ]
    assert named[3] == remove_message("old") and type(named) is FrozenList and type(named[0]) is FrozenDict
    assert write[0] == yes, "the write itself is not changed"
    one, after = AppendMessages().assign_ids(freeze(yes, "ch"), "task", 0)
    assert one == {**yes, "id": message_id("task", 0)} and after == 1


def test_assign_ids_returns_a_write_whose_messages_all_have_ids_as_it_is() -> None:
    write = freeze([{"id": "a"}, {"id": "b"}], "ch")
    calls: list[str] = []

    def seed() -> str:
        calls.append("seed")
        return "never"

    assert AppendMessages().assign_ids(write, seed, 0) == (write, 2)
    assert AppendMessages().assign_ids(write, seed, 0)[0] is write
    assert calls == [], "the write's name is not even computed"


def test_a_message_that_reaches_the_reducer_without_an_id_is_refused() -> None:
    for write in ({"content": "x"}, [{"id": "1"}, {"id": None, "content": "x"}]):
        with pytest.raises(InvalidUpdateError) as info:
            fold(AppendMessages(), write)
        assert "has no id" in str(info.value)


def test_identical_messages_written_through_a_run_state_are_two_messages() -> None:
    state = RunState(StateSchema.builder().add("messages", AppendMessages()).build())
    yes = {"role": "user", "content": "yes"}
    state.write("messages", yes)
    state.write("messages", yes)
    state.write("messages", [yes, yes])
    state.merge_writes([("messages", yes), ("messages", yes)])
    ids = [m["id"] for m in state["messages"]]
    assert [m["content"] for m in state["messages"]] == ["yes"] * 6
    assert len(set(ids)) == 6


def test_remove_message_deletes_by_id() -> None:
    out = fold(
        AppendMessages(),
        [{"id": "1"}, {"id": "2"}, {"id": "3"}],
        remove_message("2"),
        [remove_message("1"), {"id": "4"}],
    )
    assert out == [{"id": "3"}, {"id": "4"}]


def test_remove_then_re_add_in_one_write_appends_at_the_end() -> None:
    out = fold(AppendMessages(), [{"id": "a"}, {"id": "b"}], [remove_message("a"), {"id": "a", "v": 2}])
    assert out == [{"id": "b"}, {"id": "a", "v": 2}]


def test_removing_an_unknown_id_is_message_not_found() -> None:
    with pytest.raises(MessageNotFoundError) as info:
        fold(AppendMessages(), [{"id": "1"}], remove_message("nope"))
    err = info.value
    assert isinstance(err, InvalidUpdateError)
    assert err.channel == "ch" and err.message_id == "nope"
    assert "'nope'" in str(err)


def test_removing_twice_in_one_write_is_message_not_found() -> None:
    with pytest.raises(MessageNotFoundError):
        fold(AppendMessages(), [{"id": "1"}], [remove_message("1"), remove_message("1")])


@pytest.mark.parametrize("bad", ["", None, 3])
def test_remove_message_needs_a_non_empty_str(bad: Any) -> None:
    with pytest.raises(TypeError):
        remove_message(bad)


@pytest.mark.parametrize(
    ("write", "fragment"),
    [
        ("just text", "got str"),
        (42, "got int"),
        (["text"], "item 0 is a str"),
        ([{"id": "ok"}, 5], "item 1 is a int"),
        ({"id": 7}, "an id is a non-empty str"),
        ({"id": ""}, "an id is a non-empty str"),
        ({"$remove": "1", "extra": True}, "removal marker"),
        ({"$remove": 1}, "removal marker"),
    ],
)
def test_append_messages_refuses_what_is_not_a_message(write: Any, fragment: str) -> None:
    with pytest.raises(InvalidUpdateError) as info:
        fold(AppendMessages(), [{"id": "1"}], write)
    assert info.value.channel == "ch"
    assert fragment in str(info.value)


def test_append_messages_never_changes_its_input() -> None:
    current = freeze([{"id": "1", "v": 0}], "ch")
    AppendMessages().reduce(current, freeze([{"id": "1", "v": 1}, {"id": "2"}], "ch"), "ch")
    assert current == [{"id": "1", "v": 0}]


def test_append_messages_normalize_gives_ids_to_a_starting_history_by_position() -> None:
    system = {"role": "system", "content": "be brief"}
    start = AppendMessages().normalize(freeze([system, system], "ch"), "ch")
    assert [m["id"] for m in start] == [message_id("start", 0), message_id("start", 1)]
    with_ids = freeze([{"id": "x"}], "ch")
    assert AppendMessages().normalize(with_ids, "ch") is with_ids
    with pytest.raises(InvalidUpdateError):
        AppendMessages().normalize(freeze({"id": "x"}, "ch"), "ch")


# -- MergeMap -----------------------------------------------------------------------------


def test_merge_map_is_shallow_by_default() -> None:
    out = fold(MergeMap(), {"a": 1, "cfg": {"x": 1, "y": 1}}, {"b": 2, "cfg": {"x": 2}})
    assert out == {"a": 1, "b": 2, "cfg": {"x": 2}}
    assert type(out) is FrozenDict


def test_merge_map_deep_merges_nested_dicts() -> None:
    out = fold(
        MergeMap(deep=True),
        {"a": 1, "cfg": {"x": 1, "y": {"p": 1, "q": 1}}},
        {"cfg": {"x": 2, "y": {"q": 2}, "z": 3}},
    )
    assert out == {"a": 1, "cfg": {"x": 2, "y": {"p": 1, "q": 2}, "z": 3}}
    assert type(out["cfg"]["y"]) is FrozenDict


def test_deep_merge_replaces_when_either_side_is_not_a_dict() -> None:
    out = fold(MergeMap(deep=True), {"a": {"x": 1}, "b": 1}, {"a": [1], "b": {"y": 2}})
    assert out == {"a": [1], "b": {"y": 2}}


def test_merge_map_refuses_a_non_dict_and_leaves_its_input_alone() -> None:
    current = freeze({"a": 1}, "ch")
    with pytest.raises(InvalidUpdateError) as info:
        MergeMap().reduce(current, freeze([1], "ch"), "ch")
    assert "got list" in str(info.value)
    MergeMap().reduce(current, freeze({"a": 2}, "ch"), "ch")
    assert current == {"a": 1}


def test_merge_map_spec_tells_shallow_from_deep() -> None:
    assert MergeMap().spec() == "MergeMap"
    assert MergeMap(deep=True).spec() == "MergeMap(deep=True)"
    assert MergeMap().incremental and MergeMap(deep=True).incremental


# -- MaxByTimestamp -----------------------------------------------------------------------


def test_max_by_timestamp_keeps_the_newest_record() -> None:
    reducer = MaxByTimestamp()
    assert fold(reducer, {"ts_ms": 5, "v": "a"}, {"ts_ms": 3, "v": "old"}) == {"ts_ms": 5, "v": "a"}
    assert fold(reducer, {"ts_ms": 5, "v": "a"}, {"ts_ms": 9.5, "v": "new"}) == {"ts_ms": 9.5, "v": "new"}


def test_max_by_timestamp_on_a_tie_the_later_write_wins() -> None:
    assert fold(MaxByTimestamp(), {"ts_ms": 5, "v": "a"}, {"ts_ms": 5, "v": "b"}) == {"ts_ms": 5, "v": "b"}


def test_max_by_timestamp_uses_the_configured_field() -> None:
    reducer = MaxByTimestamp(field="at")
    assert fold(reducer, {"at": 2}, {"at": 1, "ts_ms": 99}) == {"at": 2}
    assert reducer.spec() == "MaxByTimestamp(field='at')"


@pytest.mark.parametrize("bad", [{"v": 1}, {"ts_ms": "5"}, {"ts_ms": True}, {"ts_ms": None}, [{"ts_ms": 1}], 5])
def test_max_by_timestamp_refuses_a_record_without_a_numeric_field(bad: Any) -> None:
    with pytest.raises(InvalidUpdateError) as info:
        fold(MaxByTimestamp(), bad)  # as a first write
    assert info.value.channel == "ch"
    with pytest.raises(InvalidUpdateError):
        fold(MaxByTimestamp(), {"ts_ms": 1}, bad)  # and as a later one
    assert "ts_ms" in str(info.value)


# -- Sum ----------------------------------------------------------------------------------


def test_sum_adds_ints_and_floats_from_zero() -> None:
    assert Sum().default() == 0
    assert fold(Sum(), 1, 2, 3) == 6
    assert fold(Sum(), 1, 0.5) == 1.5
    assert fold(Sum(), -4, start=10) == 6


@pytest.mark.parametrize("bad", ["1", None, True, [1], {"n": 1}])
def test_sum_refuses_what_is_not_a_number(bad: Any) -> None:
    with pytest.raises(InvalidUpdateError) as info:
        fold(Sum(), 1, bad)
    assert "Sum takes numbers" in str(info.value)


@pytest.mark.parametrize(("a", "b"), [(2**63, 2**63), (-(2**63), -1), (1e308, 1e308), (-1e308, -1e308)])
def test_sum_refuses_a_total_that_is_not_json(a: Any, b: Any) -> None:
    with pytest.raises(InvalidUpdateError) as info:
        fold(Sum(), a, b)
    assert "overflowed" in str(info.value)


# -- callables and as_reducer -------------------------------------------------------------


def test_any_two_argument_callable_is_a_reducer() -> None:
    reducer = as_reducer(operator.add)
    assert isinstance(reducer, CallableReducer)
    assert reducer.reduce(2, 3, "ch") == 5
    assert reducer.name == "_operator.add"
    assert not reducer.trusted and not reducer.incremental

    def keep_longest(a: str | None, b: str) -> str:
        return a if a is not None and len(a) >= len(b) else b

    named = as_reducer(keep_longest)
    assert fold(named, "ab", "a", "abc") == "abc"
    assert named.spec().endswith("keep_longest")
    assert "keep_longest" in repr(named)


def top3(current: list[int] | None, incoming: list[int]) -> list[int]:
    """Keeps the three largest numbers seen (LangGraph tests use reducers of this kind)."""
    return sorted([*(current or []), *incoming], reverse=True)[:3]


class Scores(TypedDict):
    top: Annotated[list[int], top3]


@pytest.mark.parametrize(
    "schema",
    [StateSchema.builder().add("top", top3).build(), StateSchema.from_typed_dict(Scores)],
    ids=["builder", "typed-dict"],
)
def test_a_function_reducer_is_applied_to_the_first_write_too(schema: StateSchema) -> None:
    state = RunState(schema)
    state.write("top", [5, 1, 9, 7])
    assert state["top"] == [9, 7, 5], "the first write went through the reducer, not around it"
    state.write("top", [8])
    assert state["top"] == [9, 8, 7]


def test_a_function_reducer_gets_none_or_the_default_as_the_first_current_value() -> None:
    seen: list[Any] = []

    def record(current: Any, incoming: Any) -> Any:
        seen.append(current)
        return incoming

    schema = StateSchema.builder().add("bare", record).add("started", record, default=[0]).build()
    RunState(schema).merge_writes([("bare", 1), ("started", 2), ("bare", 3)])
    assert seen == [None, [0], 1]


def test_a_node_s_first_write_to_a_function_reducer_goes_through_it() -> None:
    g = Graph(Scores).add_node("score", lambda s: {"top": [4, 2, 6, 3]})
    out = g.add_edge(START, "score").add_edge("score", END).compile().invoke({})
    assert out["top"] == [6, 4, 3]


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.lists(st.integers(-50, 50), max_size=4), max_size=6), st.sampled_from(["single", "batch"]))
def test_folding_writes_through_a_function_reducer_is_reducing_them_from_none(
    writes: list[list[int]], how: str
) -> None:
    state = RunState(StateSchema.builder().add("top", top3).build())
    if how == "single":
        for w in writes:
            state.write("top", w)
    else:
        state.merge_writes([("top", w) for w in writes])
    expected = functools.reduce(top3, writes, None) if writes else None
    assert state.get("top") == expected


def test_as_reducer_accepts_instances_and_classes_and_refuses_the_rest() -> None:
    instance = Sum()
    assert as_reducer(instance) is instance
    assert isinstance(as_reducer(AppendList), AppendList)
    with pytest.raises(TypeError):
        as_reducer(42)


def test_a_reducer_that_mutates_its_input_cannot_corrupt_state() -> None:
    schema = StateSchema.builder().add("log", lambda a, b: a.append(b) or a, default=[]).build()
    state = RunState(schema)
    with pytest.raises(ReducerError) as info:
        state.write("log", 1)
    assert info.value.channel == "log"
    assert isinstance(info.value.__cause__, ReadOnlyStateError)
    assert state["log"] == [] and state.version == 0


def test_base_reducer_must_be_subclassed() -> None:
    with pytest.raises(NotImplementedError):
        Reducer().reduce(1, 2, "ch")
    assert repr(Sum()) == "Sum()" and repr(MergeMap(deep=True)) == "MergeMap(deep=True)"
