"""The node side of subgraphs (plait.graph.subgraph: this file is named apart from
tests/engine/test_subgraph.py, as test modules share one namespace): what a subgraph writes
back to its parent, and how drawings show it."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, AppendList, AppendMessages, Graph, GraphError, StateSchema, Sum
from plait.graph.subgraph import subgraph_target, write_back


class S(TypedDict):
    x: int


def _nested() -> Any:
    leaf = Graph(S).add_node("leaf", lambda s: {"x": 1}).add_edge(START, "leaf").add_edge("leaf", END).compile()
    mid = Graph(S).add_node("deep", leaf).add_edge(START, "deep").add_edge("deep", END).compile()
    g = Graph(S).add_node("a", lambda s: {"x": 0}).add_node("mid", mid)
    return g.add_edge(START, "a").add_edge("a", "mid").add_edge("mid", END).compile()


def test_write_back_sends_what_the_subgraph_added_through_the_parents_reducers() -> None:
    parent = (
        StateSchema.builder()
        .add("items", AppendList())
        .add("total", Sum())
        .add("msgs", AppendMessages())
        .add("name", None)
        .build()
    )
    before = {"items": [1, 2], "total": 5, "msgs": [{"id": "a", "text": "hi"}], "name": "n"}
    after = {
        "items": [1, 2, 3],
        "total": 9,
        "msgs": [{"id": "a", "text": "edited"}, {"id": "b", "text": "new"}],
        "name": "n",
    }
    assert write_back(parent, before, after) == {
        "items": [3],
        "total": 4,
        "msgs": [{"id": "a", "text": "edited"}, {"id": "b", "text": "new"}],
    }
    # a list the subgraph replaced (not extended) is written whole; a new key as it is
    assert write_back(parent, {"items": [1, 2]}, {"items": [9], "name": "m"}) == {"items": [9], "name": "m"}


def test_mermaid_shows_a_subgraph_collapsed_or_expanded() -> None:
    app = _nested()
    collapsed = app.draw_mermaid()
    assert '    mid[["mid"]]:::nested' in collapsed and "subgraph" not in collapsed.replace("classDef nested", "")
    expanded = app.draw_mermaid(xray=True)
    assert '    subgraph mid["mid"]' in expanded
    assert '        subgraph mid__deep["deep"]' in expanded
    assert "            mid__deep____start__ --> mid__deep__leaf" in expanded
    assert "    a --> mid" in expanded
    assert expanded.count("\n    end\n") == 1 and expanded.count("\n        end\n") == 1


def test_ascii_and_svg_draw_a_subgraph_in_its_own_style() -> None:
    app = _nested()
    assert "[[mid]]" in app.draw_ascii() and "[a]" in app.draw_ascii()
    svg = app.draw_svg()
    assert '<g class="node subgraph" data-name="mid">' in svg and '<g class="node node" data-name="a">' in svg


def test_a_subgraph_path_must_name_a_subgraph_node() -> None:
    app = _nested()
    spec, _, ns = subgraph_target(app.spec, app.fingerprint, "", "mid:abc|deep:def")
    assert ns == "mid:abc|deep:def" and set(spec.nodes) == {"leaf"}
    for bad in ("a:abc", "mid", "mid:abc|leaf:x", ()):
        with pytest.raises(GraphError):
            subgraph_target(app.spec, app.fingerprint, "", bad)


def test_a_subgraph_with_keys_the_parent_lacks_keeps_them_private() -> None:
    class Inner(TypedDict):
        x: int
        scratch: Annotated[list[str], AppendList]

    inner = Graph(Inner).add_node("w", lambda s: {"scratch": ["s"], "x": s["x"] + 1}).add_edge(START, "w").compile()
    out = Graph(S).add_node("inner", inner).add_edge(START, "inner").compile().invoke({"x": 1})
    assert out == {"x": 2}
