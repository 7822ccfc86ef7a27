"""plait.state.schema: declaring channels with the builder or a TypedDict."""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired, Required, TypedDict

import pytest

from plait import (
    AppendList,
    AppendMessages,
    Channel,
    Default,
    LastWriteWins,
    MaxByTimestamp,
    MergeMap,
    NotSerializableError,
    ReadOnlyStateError,
    RunState,
    SchemaError,
    StateSchema,
    Sum,
    UnknownChannelError,
    message_id,
)
from plait._codec import freeze
from plait.state.reducers import NO_DEFAULT, CallableReducer


class ChatState(TypedDict):
    messages: Annotated[list[dict[str, str]], AppendMessages()]
    phase: str
    counter: Annotated[int, Sum()]
    notes: Annotated[list[str], AppendList]  # a reducer class is instantiated
    config: Annotated[dict[str, int], "docs are ignored", MergeMap(deep=True)]


def _chat_builder_schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add("messages", AppendMessages())
        .add_lww("phase")
        .add("counter", Sum())
        .add("notes", AppendList())
        .add("config", MergeMap(deep=True))
        .build()
    )


def test_builder_keeps_declaration_order_and_reducers() -> None:
    schema = _chat_builder_schema()
    assert schema.keys == ("messages", "phase", "counter", "notes", "config")
    assert len(schema) == 5 and "phase" in schema and "nope" not in schema
    assert [c.key for c in schema] == list(schema.keys)
    assert isinstance(schema.channel("messages").reducer, AppendMessages)
    assert isinstance(schema.channel("phase").reducer, LastWriteWins)
    assert schema.channels["config"].reducer.spec() == "MergeMap(deep=True)"


def test_typed_dict_and_builder_give_equal_schemas() -> None:
    from_td = StateSchema.from_typed_dict(ChatState)
    built = _chat_builder_schema()
    assert from_td == built
    assert from_td.fingerprint == built.fingerprint
    assert hash(from_td) == hash(built)
    assert from_td.keys == built.keys
    assert StateSchema.coerce(ChatState) == built
    assert StateSchema.coerce(built) is built


def test_a_plain_typed_dict_field_is_last_write_wins() -> None:
    schema = StateSchema.from_typed_dict(ChatState)
    assert isinstance(schema.channel("phase").reducer, LastWriteWins)
    assert schema.channel("phase").default is NO_DEFAULT


def test_required_and_not_required_fields_keep_their_reducer() -> None:
    class Partial(TypedDict, total=False):
        log: NotRequired[Annotated[list[str], AppendList()]]
        total: Required[Annotated[int, Sum()]]

    schema = StateSchema.from_typed_dict(Partial)
    assert isinstance(schema.channel("log").reducer, AppendList)
    assert isinstance(schema.channel("total").reducer, Sum)


def test_typed_dict_accepts_a_callable_reducer() -> None:
    class S(TypedDict):
        total: Annotated[int, operator.add]

    reducer = StateSchema.from_typed_dict(S).channel("total").reducer
    assert isinstance(reducer, CallableReducer)
    assert reducer.reduce(1, 2, "total") == 3


def test_from_typed_dict_refuses_other_types() -> None:
    with pytest.raises(SchemaError, match="not a TypedDict"):
        StateSchema.from_typed_dict(dict)


def test_natural_defaults_come_from_the_reducer() -> None:
    schema = _chat_builder_schema()
    assert schema.initial_values() == {"messages": [], "counter": 0, "notes": [], "config": {}}
    assert RunState(schema).keys() == ["messages", "counter", "notes", "config"]


def test_an_explicit_default_is_frozen_and_copied() -> None:
    default = {"retries": 3, "tags": ["a"]}
    schema = StateSchema.builder().add("cfg", MergeMap(), default=default).build()
    default["retries"] = 99
    default["tags"].append("b")  # type: ignore[attr-defined]
    assert schema.channel("cfg").default == {"retries": 3, "tags": ["a"]}
    with pytest.raises(ReadOnlyStateError):
        schema.channel("cfg").default["tags"].append("c")


def test_defaults_are_never_shared_mutable_between_runs() -> None:
    schema = StateSchema.builder().add_lww("items", default=[]).add("log", AppendList()).build()
    first, second = RunState(schema), RunState(schema)
    with pytest.raises(ReadOnlyStateError):
        first["items"].append("leak")
    first.write("log", "x")
    first.write("items", ["mine"])
    assert second["items"] == [] and second["log"] == []
    assert RunState(schema)["items"] == [] and schema.initial_values() == {"items": [], "log": []}


def test_a_default_of_none_differs_from_no_default() -> None:
    without = StateSchema.builder().add_lww("x").build()
    with_none = StateSchema.builder().add_lww("x", default=None).build()
    assert without != with_none
    assert without.fingerprint != with_none.fingerprint
    assert "x" not in RunState(without)
    assert RunState(with_none)["x"] is None


def test_fingerprint_depends_on_keys_order_reducers_options_and_defaults() -> None:
    base = StateSchema.builder().add_lww("a").add("b", Sum()).build()
    same = StateSchema.builder().add_lww("a").add("b", Sum()).build()
    variants = [
        StateSchema.builder().add("b", Sum()).add_lww("a").build(),
        StateSchema.builder().add_lww("a").add("b", AppendList()).build(),
        StateSchema.builder().add_lww("a").add("b", Sum(), default=5).build(),
        StateSchema.builder().add_lww("a").add("c", Sum()).build(),
        StateSchema.builder().add_lww("a").add("b", Sum()).add_lww("c").build(),
    ]
    assert base.fingerprint == same.fingerprint and base == same
    fingerprints = {base.fingerprint, *(v.fingerprint for v in variants)}
    assert len(fingerprints) == 1 + len(variants)
    assert (
        StateSchema.builder().add("m", MergeMap()).build().fingerprint
        != StateSchema.builder().add("m", MergeMap(deep=True)).build().fingerprint
    )
    assert (
        StateSchema.builder().add("t", MaxByTimestamp()).build().fingerprint
        != StateSchema.builder().add("t", MaxByTimestamp(field="at")).build().fingerprint
    )


def test_fingerprint_is_a_stable_hex_string() -> None:
    fp = _chat_builder_schema().fingerprint
    assert len(fp) == 32 and int(fp, 16) >= 0
    assert fp == _chat_builder_schema().fingerprint


def test_a_key_declared_twice_is_a_schema_error() -> None:
    builder = StateSchema.builder().add_lww("phase")
    with pytest.raises(SchemaError, match="'phase' is declared twice"):
        builder.add("phase", AppendList())
    assert builder.build().keys == ("phase",)  # the bad declaration changed nothing


@pytest.mark.parametrize("key", ["", "__start__", "__private", 5, None])
def test_bad_keys_are_schema_errors(key: object) -> None:
    with pytest.raises(SchemaError):
        StateSchema.builder().add(key, Sum())  # type: ignore[arg-type]


def test_a_non_reducer_is_a_schema_error_naming_the_channel() -> None:
    with pytest.raises(SchemaError, match="channel 'x'"):
        StateSchema.builder().add("x", 42)


def test_an_empty_schema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="at least one channel"):
        StateSchema.builder().build()


def test_a_non_json_default_is_refused_naming_the_channel() -> None:
    with pytest.raises(NotSerializableError) as info:
        StateSchema.builder().add_lww("when", default={"at": object()})
    assert info.value.channel == "when" and info.value.path == "when.at"


def test_an_append_messages_default_gets_ids_by_position() -> None:
    system = {"role": "system", "content": "be brief"}
    schema = StateSchema.builder().add("messages", AppendMessages(), default=[system, system]).build()
    state = RunState(schema)
    first, second = message_id("start", 0), message_id("start", 1)
    assert state["messages"] == [{**system, "id": first}, {**system, "id": second}]
    state.write("messages", {"id": "u1", "role": "user", "content": "hi"})
    assert [m["id"] for m in state["messages"]] == [first, second, "u1"]


def test_with_ids_names_a_batch_s_messages_by_its_seed_and_their_position_across_it() -> None:
    schema = StateSchema.builder().add("messages", AppendMessages()).add("log", AppendList()).build()
    yes = freeze({"role": "user", "content": "yes"}, "messages")
    writes = [("messages", yes), ("log", "not a message"), ("messages", [yes, {"id": "x"}, yes])]
    named = schema.with_ids(writes, "task-7")
    assert [k for k, _ in named] == ["messages", "log", "messages"]
    assert named[0][1]["id"] == message_id("task-7", 0)
    assert named[1] == ("log", "not a message")
    assert [m["id"] for m in named[2][1]] == [message_id("task-7", 1), "x", message_id("task-7", 3)]
    plain = StateSchema.builder().add("log", AppendList()).build()
    only_log = writes[1:2]
    assert plain.with_ids(only_log, "task-7") is only_log, "without a message channel there is nothing to do"


def test_a_default_the_reducer_cannot_take_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="'latest'"):
        StateSchema.builder().add("latest", MaxByTimestamp(), default={"v": 1})
    with pytest.raises(SchemaError, match="'messages'"):
        StateSchema.builder().add("messages", AppendMessages(), default=["not a message"])


def test_channel_lookup_of_an_unknown_key_lists_the_known_ones() -> None:
    schema = _chat_builder_schema()
    with pytest.raises(UnknownChannelError) as info:
        schema.channel("mesages", node="n1")
    err = info.value
    assert err.channel == "mesages" and err.node == "n1"
    assert err.known == schema.keys
    assert "'messages'" in str(err) and "'config'" in str(err)


def test_describe_and_repr() -> None:
    schema = StateSchema.builder().add("log", AppendList()).add_lww("phase").build()
    assert schema.describe() == [
        {"key": "log", "reducer": "AppendList", "incremental": True},
        {"key": "phase", "reducer": "LastWriteWins", "incremental": False},
    ]
    assert repr(schema) == "StateSchema(log: AppendList(), phase: LastWriteWins())"


def test_channel_records_are_frozen() -> None:
    channel = _chat_builder_schema().channel("phase")
    assert isinstance(channel, Channel)
    with pytest.raises(AttributeError):
        channel.key = "other"  # type: ignore[misc]


def test_unresolvable_annotations_are_a_schema_error_that_says_what_to_do() -> None:
    class Local(TypedDict):
        log: Annotated[list[Undefined], AppendList()]  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(SchemaError, match="module level"):
        StateSchema.from_typed_dict(Local)


class Planned(TypedDict):
    phase: Annotated[str, LastWriteWins(), Default("plan")]
    todo: Annotated[list[str], AppendList(), Default(["read"])]
    tries: Annotated[int, Default(0)]
    notes: Annotated[list[str], AppendList()]


def test_a_typed_dict_declares_defaults_beside_its_reducers() -> None:
    schema = StateSchema.from_typed_dict(Planned)
    assert schema.initial_values() == {"phase": "plan", "todo": ["read"], "tries": 0, "notes": []}
    assert isinstance(schema.channels["tries"].reducer, LastWriteWins)  # Default alone: last-write-wins
    built = (
        StateSchema.builder()
        .add_lww("phase", default="plan")
        .add("todo", AppendList(), default=["read"])
        .add_lww("tries", default=0)
        .add("notes", AppendList())
        .build()
    )
    assert schema.fingerprint == built.fingerprint  # the same schema as the builder's


TODO = ["read"]


class Own(TypedDict):
    todo: Annotated[list[str], AppendList(), Default(TODO)]


class Twice(TypedDict):
    phase: Annotated[str, Default("a"), Default("b")]


def test_a_typed_dict_default_is_frozen_and_given_once() -> None:
    schema = StateSchema.from_typed_dict(Own)
    TODO.append("changed later")
    try:
        assert list(schema.initial_values()["todo"]) == ["read"]
    finally:
        TODO.pop()
    with pytest.raises(SchemaError, match="two Default"):
        StateSchema.from_typed_dict(Twice)


# -- channels declared with a plain function reducer start from their type's empty value -----


def _merge_dicts(current: Any, incoming: Any) -> Any:
    return {**(current or {}), **incoming}


class _LangGraphStyle(TypedDict):
    items: Annotated[list[int], operator.add]
    count: Annotated[int, operator.add]
    scores: Annotated[dict[str, Any], _merge_dicts]
    text: Annotated[str, operator.add]
    seeded: Annotated[list[Any], operator.add, Default([1])]
    log: Annotated[list[Any], AppendList()]
    anything: Annotated[object, _merge_dicts]
    phase: str


def test_function_reducers_start_from_the_type_s_empty_value_plait_reducers_keep_theirs() -> None:
    assert StateSchema.from_typed_dict(_LangGraphStyle).initial_values() == {
        "items": [],
        "count": 0,
        "scores": {},
        "text": "",
        "seeded": [1],
        "log": [],
    }


def test_a_first_node_reads_a_function_reduced_channel(make_saver: Any) -> None:
    from plait import END, START, Graph

    def first(state: Any) -> dict[str, Any]:
        return {"items": [len(state["items"])], "count": state["count"] + 1}

    app = Graph(_LangGraphStyle).add_node("first", first).add_edge(START, "first").add_edge("first", END)
    out = app.compile(make_saver()).invoke({"items": [7]}, thread_id="t")
    assert out["items"] == [7, 1] and out["count"] == 1
