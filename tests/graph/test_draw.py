"""Drawings: Mermaid, ASCII and SVG, computed locally from a GraphSpec."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from plait import END, START, AppendList, Dag, Graph, Send, StateSchema
from plait.engine.spec import GraphSpec
from plait.graph.draw import draw_ascii, draw_mermaid, draw_svg

SVG = "{http://www.w3.org/2000/svg}"


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww("verdict").build()


def noop(state: Any) -> None:
    return None


def agent_spec() -> GraphSpec:
    """Fan-out, a join, a conditional edge with a path_map, a loop and a Send router."""
    g = Graph(schema())
    for name in ("plan", "web", "docs", "merge", "review", "fix", "publish", "worker"):
        g.add_node(name, noop)
    g.add_edge(START, "plan").add_edge("plan", "web").add_edge("plan", "docs")
    g.add_edge(["web", "docs"], "merge").add_edge("merge", "review")
    g.add_conditional_edges("review", lambda s: "publish", {"ok": "publish", "again": "fix"})
    g.add_edge("fix", "review")
    g.add_conditional_edges("publish", lambda s: [Send("worker", 1)])
    g.add_edge("worker", END)
    return g.compile().spec


def mermaid_structure(text: str) -> tuple[dict[str, str], list[tuple[str, str, str, str]]]:
    """Declared nodes (id -> label) and edges (src, arrow, label, dst) of our Mermaid output."""
    lines = text.strip().splitlines()
    assert lines[0] == "flowchart TD"
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, str, str]] = []
    node_re = re.compile(r'^\s+(\w+)(?:\(\[|\[|\{\{)"([^"]*)"(?:\]\)|\]|\}\})(?::::\w+)?$')
    edge_re = re.compile(r'^\s+(\w+) (-->|==>|-\.->)(?:\|"([^"]*)"\|)? (\w+)$')
    for line in lines[1:]:
        if line.strip().startswith("classDef"):
            continue
        if m := node_re.match(line):
            nodes[m.group(1)] = m.group(2)
        elif m := edge_re.match(line):
            edges.append((m.group(1), m.group(2), m.group(3) or "", m.group(4)))
        else:
            pytest.fail(f"unexpected Mermaid line: {line!r}")
    return nodes, edges


def test_mermaid_declares_every_node_and_edges_reference_only_declared_ids() -> None:
    nodes, edges = mermaid_structure(draw_mermaid(agent_spec()))
    labels = set(nodes.values())
    assert {"START", "END", "plan", "web", "docs", "merge", "review", "fix", "publish", "worker"} <= labels
    assert edges
    for src, _, _, dst in edges:
        assert src in nodes and dst in nodes


def test_mermaid_kinds_of_edge_look_different() -> None:
    nodes, edges = mermaid_structure(draw_mermaid(agent_spec()))
    by_label = {v: k for k, v in nodes.items()}
    found = {(nodes[s], arrow, label, nodes[d]) for s, arrow, label, d in edges}
    assert ("START", "-->", "", "plan") in found
    assert ("web", "==>", "join", "merge") in found and ("docs", "==>", "join", "merge") in found
    assert ("review", "-.->", "ok", "publish") in found
    assert ("review", "-.->", "again", "fix") in found
    assert ("publish", "-.->", "dynamic", "worker") in found
    assert ("worker", "-->", "", "END") in found
    assert by_label["START"] != by_label["END"]


def test_mermaid_ids_are_safe_for_awkward_node_names() -> None:
    g = Graph(schema())
    g.add_node("end", noop).add_node("two words", noop).add_node('say "hi"', noop)
    g.add_edge(START, "end").add_edge("end", "two words").add_edge("two words", 'say "hi"').add_edge('say "hi"', END)
    nodes, edges = mermaid_structure(draw_mermaid(g.compile().spec))
    assert {"end", "two words", "say #quot;hi#quot;"} <= set(nodes.values())
    assert "end" not in nodes  # a Mermaid keyword is never used as an id
    assert len(edges) == 4


def test_router_without_path_map_and_no_orphans_points_to_a_dynamic_marker() -> None:
    g = Graph(schema())
    g.add_node("a", noop).add_node("b", noop)
    g.add_edge(START, "a").add_edge("a", "b").add_conditional_edges("b", lambda s: END)
    nodes, edges = mermaid_structure(draw_mermaid(g.compile().spec))
    marker = [k for k, v in nodes.items() if v == "dynamic"]
    assert len(marker) == 1
    assert any(s == "b" and d == marker[0] and arrow == "-.->" for s, arrow, _, d in edges)


def test_svg_parses_and_has_a_text_per_node() -> None:
    spec = agent_spec()
    root = ET.fromstring(draw_svg(spec))
    assert root.tag == f"{SVG}svg"
    groups = [g for g in root.iter(f"{SVG}g") if "node" in (g.get("class") or "").split()]
    names = [g.findtext(f"{SVG}text", default="") for g in groups]
    assert sorted(names) == sorted(["START", "END", *spec.nodes])
    texts = {t.text for t in root.iter(f"{SVG}text")}
    assert set(spec.nodes) <= texts


def test_svg_marks_conditional_and_dynamic_edges_dashed_and_joins_thick() -> None:
    root = ET.fromstring(draw_svg(agent_spec()))
    paths = [p for p in root.iter(f"{SVG}path") if (p.get("class") or "").startswith("edge")]
    kinds = {p.get("class", "").split()[1] for p in paths}
    assert kinds == {"edge", "join", "conditional", "dynamic"}
    for p in paths:
        kind = p.get("class", "").split()[1]
        assert (p.get("stroke-dasharray") is not None) == (kind in ("conditional", "dynamic"))
        if kind == "join":
            assert float(p.get("stroke-width", "0")) > 2


def test_svg_escapes_names() -> None:
    g = Graph(schema())
    g.add_node("a<b&c", noop).add_edge(START, "a<b&c").add_edge("a<b&c", END)
    root = ET.fromstring(draw_svg(g.compile().spec))
    assert "a<b&c" in {t.text for t in root.iter(f"{SVG}text")}


def test_layers_follow_the_longest_path_from_start() -> None:
    dag = Dag(schema()).step("a", noop).step("b", noop).step("c", noop)
    dag.edge("a", "b").edge("b", "c").edge("a", "c")
    text = draw_ascii(dag.compile().spec)
    rows = [line.strip() for line in text.split("\n\n")[0].splitlines() if line.strip() not in ("|", "v")]
    assert rows == ["(START)", "[a]", "[b]", "[c]", "(END)"]


def test_ascii_lists_every_edge_with_its_kind() -> None:
    text = draw_ascii(agent_spec())
    assert "  web ==> merge  [join: waits for all its sources]" in text
    assert "  review -.-> publish  [ok]" in text
    assert "  fix --> review  [loop]" in text
    assert "  publish ~~> worker  [dynamic]" in text
    assert "[web]   [docs]" in text or "[docs]   [web]" in text


def test_command_destinations_are_drawn_as_conditional_edges() -> None:
    g = Graph(schema())
    g.add_node("a", noop, destinations=["b", END]).add_node("b", noop)
    g.add_edge(START, "a").add_edge("b", END)
    nodes, edges = mermaid_structure(draw_mermaid(g.compile().spec))
    assert ("a", "-.->", "goto", "b") in edges


def test_svg_boxes_do_not_overlap() -> None:
    root = ET.fromstring(draw_svg(agent_spec()))
    boxes = []
    for g in root.iter(f"{SVG}g"):
        if "node" in (g.get("class") or "").split():
            r = g.find(f"{SVG}rect")
            assert r is not None
            x, y, w, h = (float(r.get(k, "0")) for k in ("x", "y", "width", "height"))
            boxes.append((x, y, x + w, y + h))
    assert len(boxes) == len(agent_spec().nodes) + 2  # a box per node, START and END: none would check nothing
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
