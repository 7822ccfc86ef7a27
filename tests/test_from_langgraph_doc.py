"""docs/from-langgraph.md says what plait lacks and what it has: both lists are checked here,
so the page cannot claim a gap plait has closed (it once listed six things plait had)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import plait
from plait import END, START, CompiledGraph, Graph, InvalidUpdateError, MessagesState

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "from-langgraph.md"


def _gaps() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## What plait does not have (today)")
    end = text.find("\n## ", start + 5)
    return text[start : end if end != -1 else None]


def test_the_functional_api_is_there_as_the_page_says_with_task_caching() -> None:
    gaps = _gaps()
    assert "functional API\n(`@entrypoint`, `@task`)" in gaps and "cache_policy=" not in gaps
    assert hasattr(plait, "entrypoint") and hasattr(plait, "task")
    assert plait.task(lambda x: x, cache_policy=plait.CachePolicy(ttl=1)).cache_policy == plait.CachePolicy(ttl=1)
    assert hasattr(CompiledGraph, "draw_mermaid") and hasattr(CompiledGraph, "draw_svg")


def test_messages_are_not_coerced_from_strings_as_the_page_says_but_tuples_are() -> None:
    assert "coercion from strings" in _gaps() and "tuple" in _gaps()
    g = Graph(MessagesState).add_node("n", lambda s: {"messages": ["hi"]})
    with pytest.raises(InvalidUpdateError):
        g.add_edge(START, "n").add_edge("n", END).compile().invoke({"messages": []})
    t = Graph(MessagesState).add_node("n", lambda s: {"messages": [("human", "hi")]})
    (said,) = t.add_edge(START, "n").add_edge("n", END).compile().invoke({"messages": []})["messages"]
    assert (said["type"], said["content"]) == ("human", "hi")


def test_what_the_page_says_plait_has_is_there() -> None:
    gaps = _gaps()
    for said in (
        "get_graph()",
        "subgraphs",
        "add_node(fn)",
        "context=Ctx",
        "set_finish_point",
        "plait studio",
        "plait worker",
    ):
        assert said in gaps, said
    assert hasattr(CompiledGraph, "get_graph")
    inner = Graph(MessagesState).add_node("say", lambda s: {"messages": [{"role": "ai", "content": "x"}]})
    inner.add_edge(START, "say").add_edge("say", END)

    def named(state: Any) -> Any:
        return {}

    g = Graph(MessagesState).add_node(named).add_node("sub", inner.compile())
    g.set_entry_point("named").add_edge("named", "sub").set_finish_point("sub")
    assert len(g.compile().invoke({"messages": []})["messages"]) == 1
    assert hasattr(Graph, "set_entry_point") and "context" in Graph.__init__.__code__.co_varnames
    from plait.cli.app import build_command  # the studio and worker commands exist

    assert {"studio", "worker"} <= set(build_command().commands)
