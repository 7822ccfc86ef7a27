"""``get_graph()``: a drawable object with LangGraph's names (``nodes``, ``edges``,
``draw_mermaid``, ``draw_ascii``, ``draw_png``), every drawing made offline; ported from
LangGraph's ``test_node_destinations`` edge list."""

from __future__ import annotations

import operator
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, Command, DrawingUnavailableError, Graph, GraphDrawing


class Foo(TypedDict):
    foo: Annotated[str, operator.add]


def _app() -> Any:
    def node_a(state: Any) -> Any:
        return Command(update={"foo": "a"}, goto="node_b", graph=Command.PARENT)

    subgraph = Graph(Foo).add_node(node_a).add_edge(START, "node_a").compile()
    b = Graph(Foo).add_node("child", subgraph, destinations=("node_b", "node_c"))
    b.add_node("node_b", lambda s: {"foo": "b"}).add_node("node_c", lambda s: {"foo": "c"})
    return b.add_edge(START, "child").add_edge("node_b", END).add_edge("node_c", END).compile()


def test_the_edges_are_langgraphs() -> None:
    graph = _app().get_graph()
    assert isinstance(graph, GraphDrawing)
    assert [(e.source, e.target, e.conditional) for e in graph.edges] == [
        ("__start__", "child", False),
        ("child", "node_b", True),
        ("child", "node_c", True),
        ("node_b", "__end__", False),
        ("node_c", "__end__", False),
    ]
    assert list(graph.nodes) == ["__start__", "child", "node_b", "node_c", "__end__"]
    assert graph.nodes["child"].name == "child"
    goto = {"source": "child", "target": "node_b", "conditional": True, "data": "goto"}
    assert goto in graph.to_json()["edges"] and graph.edges[1].data == "goto"


def test_the_drawings_are_the_compiled_graphs() -> None:
    app = _app()
    assert app.get_graph().draw_mermaid() == app.draw_mermaid()
    assert app.get_graph(xray=True).draw_mermaid() == app.draw_mermaid(xray=True) != app.draw_mermaid()
    assert app.get_graph().draw_ascii() == app.draw_ascii()
    assert app.get_graph().draw_svg() == app.draw_svg()


def test_draw_png_makes_a_png_offline(tmp_path: Path) -> None:
    pytest.importorskip("cairosvg")
    graph = _app().get_graph()
    png = graph.draw_png()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert graph.draw_mermaid_png(tmp_path / "g.png") == png == (tmp_path / "g.png").read_bytes()


def test_draw_png_without_cairosvg_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cairosvg", None)  # as if it were not installed
    with pytest.raises(DrawingUnavailableError, match=r"pip install 'plait\[draw\]'") as caught:
        _app().get_graph().draw_png()
    assert isinstance(caught.value, ImportError) and caught.value.what == "draw_png()"
