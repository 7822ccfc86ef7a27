"""plait.state.messages: reading a model's stream and adding it up into LangChain's message,
and AppendMessages holding messages of either shape."""

from __future__ import annotations

import functools
import json
import operator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait import (
    AppendMessages,
    InvalidUpdateError,
    MessageChunkError,
    MessageNotFoundError,
    RunState,
    StateSchema,
    remove_message,
)
from plait.state.messages import Chunk, MessageBuilder, as_langchain, chunk_item, kind_of, read_chunk


def build(*chunks: Any, message_id: str = "m1") -> dict[str, Any]:
    builder = MessageBuilder(message_id)
    for i, chunk in enumerate(chunks):
        builder.add(read_chunk(chunk, i))
    return builder.message()


def splits(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at the positions ``cuts`` (any order, repeats allowed: empty pieces)."""
    points = [0, *sorted(c % (len(text) + 1) for c in cuts), len(text)]
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


# -- the law: the pieces of a text add up to the text ----------------------------------------


@given(st.text(), st.lists(st.integers(min_value=0), max_size=12))
def test_text_deltas_of_any_split_add_up_to_the_text(text: str, cuts: list[int]) -> None:
    message = build(*splits(text, cuts))
    assert message["content"] == text
    assert message["tool_calls"] == [] and message["type"] == "ai" and message["id"] == "m1"


@given(
    st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | st.text(max_size=5), max_size=4),
    st.lists(st.integers(min_value=0), max_size=8),
)
def test_tool_call_fragments_of_any_split_add_up_to_the_call(args: dict[str, Any], cuts: list[int]) -> None:
    raw = json.dumps(args)
    pieces = splits(raw, cuts)
    chunks = [{"content": "", "tool_call_chunks": [{"name": "f", "id": "c1", "args": pieces[0], "index": 0}]}]
    chunks += [{"content": "", "tool_call_chunks": [{"args": p, "index": 0}]} for p in pieces[1:]]
    message = build(*chunks)
    assert message["tool_calls"] == [{"name": "f", "args": args, "id": "c1", "type": "tool_call"}]
    assert message["invalid_tool_calls"] == []


# -- what a chunk may be ----------------------------------------------------------------------


def test_a_chunk_is_a_str_a_dict_or_an_object_with_content() -> None:
    class Obj:
        content = "c"
        tool_call_chunks = [{"name": "g", "args": "{}", "id": "x", "index": 1}]

    assert read_chunk("a", 0) == Chunk("a", [], [])
    assert read_chunk({"content": "b"}, 0) == Chunk("b", [], [])
    read = read_chunk(Obj(), 0)
    assert read.content == "c" and read.tool_call_chunks == [{"name": "g", "args": "{}", "id": "x", "index": 1}]
    assert read_chunk({"content": None}, 0).content == ""


@pytest.mark.parametrize(
    ("chunk", "says"),
    [(42, "is a int"), ({"content": 3}, "has content of type int"), (object(), "is a object")],
)
def test_a_chunk_of_no_known_kind_is_refused_saying_what_a_chunk_is(chunk: Any, says: str) -> None:
    with pytest.raises(MessageChunkError, match=says) as info:
        read_chunk(chunk, 4)
    assert info.value.index == 4 and "a LangChain AIMessageChunk" in str(info.value)
    assert isinstance(info.value, TypeError)


def test_several_tool_calls_are_kept_apart_by_index_and_bad_json_is_an_invalid_call() -> None:
    message = build(
        {"content": "", "tool_call_chunks": [{"name": "a", "args": '{"x": ', "id": "1", "index": 0}]},
        {"content": "", "tool_call_chunks": [{"name": "b", "args": "{oops", "id": "2", "index": 1}]},
        {"content": "", "tool_call_chunks": [{"args": "1}", "index": 0}]},
        {"content": "", "tool_call_chunks": [{"name": "c", "args": "", "id": "3", "index": None}]},
    )
    assert message["tool_calls"] == [
        {"name": "a", "args": {"x": 1}, "id": "1", "type": "tool_call"},
        {"name": "c", "args": {}, "id": "3", "type": "tool_call"},
    ]
    assert message["invalid_tool_calls"] == [
        {"name": "b", "args": "{oops", "id": "2", "error": None, "type": "invalid_tool_call"}
    ]


def test_whole_tool_calls_of_a_chunk_without_fragments_are_kept() -> None:
    message = build({"content": "x", "tool_calls": [{"name": "f", "args": {"a": 1}, "id": "c"}]})
    assert message["tool_calls"] == [{"name": "f", "args": {"a": 1}, "id": "c", "type": "tool_call"}]


def test_content_blocks_merge_by_index_and_text_before_them_is_kept_first() -> None:
    message = build(
        "intro ",
        {"content": [{"type": "text", "text": "Hel", "index": 0}]},
        {"content": [{"type": "text", "text": "lo", "index": 0}]},
        {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}, "index": 1}]},
        {"content": [{"type": "input_json_delta", "partial_json": '{"a"', "index": 1}]},
        {"content": [{"type": "input_json_delta", "partial_json": ": 1}", "index": 1}]},
        " tail",
    )
    assert message["content"] == [
        "intro ",
        {"type": "text", "text": "Hello", "index": 0},
        {"type": "tool_use", "id": "t", "name": "f", "input": {}, "index": 1, "partial_json": '{"a": 1}'},
        " tail",
    ]


def test_usage_is_summed_and_response_metadata_kept() -> None:
    message = build(
        {"content": "a", "usage_metadata": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}},
        {"content": "b", "usage_metadata": {"input_tokens": 0, "output_tokens": 1, "total_tokens": 1}},
        {"content": "", "response_metadata": {"finish_reason": "stop"}},
    )
    assert message["usage_metadata"] == {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}
    assert message["response_metadata"] == {"finish_reason": "stop"}


def test_a_chunk_item_is_langchains_serialized_ai_message_chunk_under_the_message_id() -> None:
    item = chunk_item("m9", read_chunk({"content": "hi", "tool_call_chunks": [{"args": "{", "index": 0}]}, 0))
    assert item == {
        "type": "AIMessageChunk",
        "id": "m9",
        "content": "hi",
        "tool_call_chunks": [{"args": "{", "index": 0, "type": "tool_call_chunk"}],
        "additional_kwargs": {},
        "response_metadata": {},
        "name": None,
        "tool_calls": [],
        "invalid_tool_calls": [],
        "usage_metadata": None,
    }


# -- LangChain's own objects ------------------------------------------------------------------


def test_langchain_chunks_add_up_to_what_langchain_adds_them_up_to() -> None:
    messages = pytest.importorskip("langchain_core.messages")
    chunks = [
        messages.AIMessageChunk(content="The ", id="run-1"),
        messages.AIMessageChunk(content="answer", id="run-1"),
        messages.AIMessageChunk(
            content="", id="run-1", tool_call_chunks=[{"name": "f", "args": '{"q": ', "id": "c1", "index": 0}]
        ),
        messages.AIMessageChunk(content="", id="run-1", tool_call_chunks=[{"args": '"x"}', "index": 0}]),
        messages.AIMessageChunk(
            content=".", id="run-1", usage_metadata={"input_tokens": 2, "output_tokens": 5, "total_tokens": 7}
        ),
    ]
    ours = build(*chunks, message_id="run-1")
    theirs = messages.message_chunk_to_message(functools.reduce(operator.add, chunks))
    assert ours == {**theirs.model_dump(), "id": "run-1"}
    assert messages.AIMessage(**{k: v for k, v in ours.items() if k != "type"}).content == "The answer."


# -- the two shapes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ({"role": "user"}, "human"),
        ({"role": "assistant"}, "ai"),
        ({"role": "tool"}, "tool"),
        ({"role": "system"}, "system"),
        ({"type": "human"}, "human"),
        ({"type": "ai"}, "ai"),
        ({"type": "AIMessageChunk"}, "ai"),
        ({"type": "tool"}, "tool"),
        ({"$remove": "x"}, None),
    ],
)
def test_the_kind_of_a_message_reads_either_shape(message: dict[str, Any], kind: str | None) -> None:
    assert kind_of(message) == kind


def test_as_langchain_gives_a_role_message_its_type_and_leaves_a_langchain_one_alone() -> None:
    assert as_langchain({"role": "assistant", "content": "x", "id": "1"}) == {"type": "ai", "content": "x", "id": "1"}
    lc = {"type": "tool", "content": "x", "tool_call_id": "c"}
    assert as_langchain(lc) is lc


def test_append_messages_keeps_both_shapes_as_given_with_list_content_and_removes_by_id() -> None:
    schema = StateSchema.builder().add("messages", AppendMessages()).build()
    state = RunState(schema)
    blocks = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    state.merge_writes(
        [
            (
                "messages",
                [
                    {"role": "user", "content": "hi"},
                    {"type": "human", "content": blocks},
                    {"type": "ai", "id": "a1", "content": "yes", "tool_calls": []},
                ],
            )
        ]
    )
    held = state.values["messages"]
    assert [m.get("role") or m["type"] for m in held] == ["user", "human", "ai"]
    assert held[1]["content"] == blocks and held[2]["id"] == "a1"
    assert all(isinstance(m["id"], str) and m["id"] for m in held)  # ids given to those without
    state.merge_writes([("messages", [{"type": "ai", "id": "a1", "content": "no"}])])  # same id: replaced
    assert state.values["messages"][2]["content"] == "no"
    state.merge_writes([("messages", [remove_message(held[0]["id"]), remove_message("a1")])])
    assert [m["content"] for m in state.values["messages"]] == [blocks]


def test_langchains_remove_message_removes_by_id_and_all_of_them() -> None:
    schema = StateSchema.builder().add("messages", AppendMessages()).build()
    state = RunState(schema)
    state.merge_writes([("messages", [{"type": "human", "id": "h", "content": "a"}, {"role": "user", "id": "u"}])])
    state.merge_writes([("messages", [{"type": "remove", "id": "u", "content": ""}])])
    assert [m["id"] for m in state.values["messages"]] == ["h"]
    with pytest.raises(InvalidUpdateError, match="names its target by 'id'"):
        state.merge_writes([("messages", [{"type": "remove", "content": ""}])])
    with pytest.raises(MessageNotFoundError):
        state.merge_writes([("messages", [{"type": "remove", "id": "nope"}])])
    state.merge_writes([("messages", [{"type": "remove", "id": "__remove_all__"}, {"type": "ai", "id": "z"}])])
    assert [m["id"] for m in state.values["messages"]] == ["z"]
