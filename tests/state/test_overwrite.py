"""``Overwrite(value)`` writes past a channel's reducer; ``remove_all_messages()`` empties a
message channel in one marker. Both are JSON markers, so they survive pending writes and
every backend's storage (appends stored as deltas included)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import (
    END,
    START,
    AppendList,
    AppendMessages,
    Checkpointer,
    Graph,
    InvalidUpdateError,
    Overwrite,
    RunState,
    StateSchema,
    Sum,
    remove_all_messages,
    thaw,
)


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]
    total: Annotated[int, Sum()]
    messages: Annotated[list[Any], AppendMessages()]


def test_overwrite_replaces_past_the_reducer_and_later_writes_fold_on_it() -> None:
    st = RunState(StateSchema.from_typed_dict(State))
    st.merge_writes([("log", ["a", "b"]), ("total", 5)], node="n")
    st.merge_writes([("log", Overwrite(["x"])), ("log", ["y"]), ("total", Overwrite(1)), ("total", 2)], node="n")
    assert thaw(st.values["log"]) == ["x", "y"] and st.values["total"] == 3


def test_overwrite_of_a_list_channel_takes_a_list() -> None:
    st = RunState(StateSchema.from_typed_dict(State))
    with pytest.raises(InvalidUpdateError, match="takes a list"):
        st.merge_writes([("log", Overwrite({"a": 1}))], node="n")


def msg(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_remove_all_messages_keeps_what_follows_it() -> None:
    st = RunState(StateSchema.from_typed_dict(State))
    st.merge_writes([("messages", [msg("a"), msg("b")])], node="n")
    st.merge_writes([("messages", [msg("c"), remove_all_messages(), msg("summary")])], node="n")
    assert [m["content"] for m in st.values["messages"]] == ["summary"]


def test_overwrite_of_messages_names_them(make_saver: Callable[..., Checkpointer]) -> None:
    def reset(state: Any) -> dict[str, Any]:
        return {"messages": Overwrite([msg("fresh")]), "log": Overwrite([]), "total": Overwrite(0)}

    def side(state: Any) -> dict[str, Any]:  # a sibling, so the step saves pending writes
        return {"log": ["side"]}

    def clear(state: Any) -> dict[str, Any]:
        return {"messages": [remove_all_messages(), msg("only")]}

    g = Graph(State).add_node("reset", reset).add_node("side", side).add_node("clear", clear)
    g.add_edge(START, "reset").add_edge(START, "side").add_edge(["reset", "side"], "clear").add_edge("clear", END)
    app = g.compile(make_saver())
    app.invoke({"log": ["old"] * 3, "total": 9, "messages": [msg("old")]}, thread_id="t")
    history = app.get_state_history("t")
    after_reset = history[1].values
    assert thaw(after_reset["log"]) == ["side"] and after_reset["total"] == 0
    [fresh] = after_reset["messages"]
    assert fresh["content"] == "fresh" and fresh["id"].startswith("msg-")
    assert [m["content"] for m in app.get_state("t").values["messages"]] == ["only"]
