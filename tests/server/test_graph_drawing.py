"""The graph on a thread's page: a subgraph node in a style of its own, named in the legend
only when the graph has one, and labels no smaller than 11 px in the drawing itself."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from plait import END, SqliteCheckpointer
from plait.graph.draw import SUBGRAPH
from plait.server import StudioConfig, create_app
from plait.server.graphs import NEXT, RUNNING

from ._studio_support import build_graph, compiled, make_client


def test_a_subgraph_node_has_its_own_colours_and_a_legend_entry(tmp_path: Path) -> None:
    assert SUBGRAPH[0] not in (NEXT[0], RUNNING[0]) and SUBGRAPH[1] not in (NEXT[1], RUNNING[1])
    inner = build_graph().compile(name="inner")
    outer = build_graph().add_node("review", inner).add_edge("research", "review").add_edge("review", END)
    svg = outer.compile(name="outer").draw_svg()
    node = re.search(r'<g class="node subgraph" data-name="review">(.*?)</g>', svg)
    assert node and node.group(1).count("<rect") == 2 and f'fill="{SUBGRAPH[0]}"' in node.group(1)
    sizes = {int(n) for n in re.findall(r'font-size="(\d+)"', svg)}
    assert min(sizes) >= 11, sizes

    saver = SqliteCheckpointer(str(tmp_path / "g.db"))
    compiled(saver).invoke({"topic": "rivers"}, thread_id="t")
    with make_client(saver) as plain:
        assert 'class="sw subgraph"' not in plain.get("/threads/t").text
    app = create_app(saver, [outer.compile(name="outer")], config=StudioConfig(allowed_hosts=("testserver",)))
    with TestClient(app) as c:
        page = c.get("/threads/t").text
        assert 'class="sw subgraph"' in page and 'class="node subgraph" data-name="review"' in page
    saver.close()
