"""LangGraph's spellings, accepted where they mean the same: ``config={"configurable":
{"thread_id": ...}}`` on invoke, stream, get_state, its history and update_state (a key plait
has no place for is a TypeError saying what to write), and ``(namespace, mode, item)`` items
from ``stream(subgraphs=True)`` with several modes."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, Checkpointer, Graph, RecursionLimitError


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _graph() -> Graph:
    g = Graph(State).add_node("a", lambda s: {"log": ["a"]}).add_node("b", lambda s: {"log": ["b"]})
    return g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)


def test_a_config_names_the_thread_everywhere(make_saver: Callable[..., Checkpointer]) -> None:
    app = _graph().compile(checkpointer=make_saver())
    config = {"configurable": {"thread_id": "t"}}
    assert app.invoke({"log": []}, config) == {"log": ["a", "b"]}
    assert app.get_state(config).values == {"log": ["a", "b"]}
    history = app.get_state_history(config)
    assert [h.step for h in history] == [2, 1, 0]
    first = {"configurable": {"thread_id": "t", "checkpoint_id": history[-1].checkpoint_id}}
    assert app.get_state(first).values == {"log": []}
    app.update_state(config, {"log": ["by hand"]})
    assert app.get_state("t").values["log"] == ["a", "b", "by hand"]
    assert list(app.stream({"log": []}, config=config, stream_mode="updates")) == [
        {"a": {"log": ["a"]}},
        {"b": {"log": ["b"]}},
    ]


def test_a_config_with_a_checkpoint_id_replays_and_updates_there(make_saver: Callable[..., Checkpointer]) -> None:
    app = _graph().compile(checkpointer=make_saver())
    app.invoke({"log": []}, thread_id="t")
    after_a = app.get_state_history("t")[1]
    at = {"configurable": {"thread_id": "t", "checkpoint_id": after_a.checkpoint_id}}
    assert app.invoke(None, at) == {"log": ["a", "b"]}
    app.update_state(at, {"log": ["edited"]})
    assert app.get_state("t").values["log"] == ["a", "edited"]


def test_a_numeric_thread_id_and_the_run_options_of_a_config(make_saver: Callable[..., Checkpointer]) -> None:
    app = _graph().compile(checkpointer=make_saver())
    app.invoke({"log": []}, {"configurable": {"thread_id": 1}, "metadata": {"user": "ann"}})
    assert app.get_state("1").values == {"log": ["a", "b"]}
    assert app.get_state_history("1", filter={"user": "ann"})
    loop = Graph(State).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a").add_edge("a", "a")
    with pytest.raises(RecursionLimitError) as caught:
        loop.compile().invoke({"log": []}, {"recursion_limit": 3, "max_concurrency": 2})
    assert caught.value.limit == 3


def test_a_config_and_a_keyword_that_disagree_are_refused() -> None:
    app = _graph().compile(checkpointer="memory://")
    with pytest.raises(TypeError, match="thread_id='x' and the config's thread_id 'y' disagree"):
        app.invoke({"log": []}, {"configurable": {"thread_id": "y"}}, thread_id="x")
    assert app.invoke({"log": []}, {"configurable": {"thread_id": "x"}}, thread_id="x") == {"log": ["a", "b"]}


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"configurable": {"thread_id": "t", "model": "small"}}, r"context=\{'model': 'small'\}"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": "inner:1"}}, "subgraph="),
        ({"configurable": {"thread_id": "t"}, "callbacks": []}, r"plait.instrument\(\)"),
        ({"configurable": {"thread_id": "t"}, "run_name": "x"}, r"plait.instrument\(\)"),
        ({"configurable": {"thread_id": "t"}, "something": 1}, "has no place in plait"),
        ("t", "LangGraph's dict"),
    ],
)
def test_a_config_key_without_a_place_says_what_to_write(config: Any, says: str) -> None:
    app = _graph().compile(checkpointer="memory://")
    with pytest.raises(TypeError, match=says):
        app.invoke({"log": []}, config)


def test_the_reading_calls_take_only_the_address() -> None:
    app = _graph().compile(checkpointer="memory://")
    app.invoke({"log": []}, thread_id="t")
    with pytest.raises(TypeError, match="runs nothing: drop it"):
        app.get_state({"configurable": {"thread_id": "t"}, "recursion_limit": 5})
    with pytest.raises(TypeError, match="names no thread"):
        app.get_state({"configurable": {}})
    with pytest.raises(TypeError, match="before="):
        app.get_state_history({"configurable": {"thread_id": "t", "checkpoint_id": "x"}})


def test_subgraph_items_with_several_modes_are_namespace_mode_item() -> None:
    inner = Graph(State).add_node("i", lambda s: {"log": ["i"]}).add_edge(START, "i").add_edge("i", END)
    outer = Graph(State).add_node("sub", inner.compile()).add_edge(START, "sub").add_edge("sub", END)
    items = list(outer.compile().stream({"log": []}, stream_mode=["updates", "values"], subgraphs=True))
    assert all(len(item) == 3 for item in items)
    shapes = [(len(ns), mode) for ns, mode, _ in items]
    assert shapes == [(0, "values"), (1, "values"), (1, "updates"), (1, "values"), (0, "updates"), (0, "values")]
    assert items[-1] == ((), "values", {"log": ["i"]})
    one_mode = list(outer.compile().stream({"log": []}, stream_mode="updates", subgraphs=True))
    assert [len(item) for item in one_mode] == [2, 2]  # (namespace, item), as LangGraph
