"""Drawings of a graph's structure: Mermaid text, an ASCII sketch and a standalone SVG.

Everything is computed here, with no network and no graphviz. The layout is layered: a node's
layer is its longest path from START once the edges that close loops are set aside, so the
drawing reads top to bottom in the order the super-steps run. Four kinds of edge are kept
visibly apart:

* ``edge``: a static edge (``add_edge(a, b)``): a solid arrow;
* ``join``: one source of ``add_edge([a, b], c)``: a thick arrow labelled ``join``;
* ``conditional``: a router's possible target (``add_conditional_edges`` with a path_map,
  labelled with the router's return values), or a ``Command`` destination: a dashed arrow;
* ``dynamic``: a router without a path_map (it may return ``Send``\\ s or any name): a dashed
  arrow labelled ``dynamic`` to every node nothing else leads to, or to a ``dynamic`` marker.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal
from xml.sax.saxutils import escape

from plait.engine.spec import GraphSpec
from plait.graph.subgraph import SubgraphNode
from plait.types import END, START

__all__ = ["draw_ascii", "draw_json", "draw_mermaid", "draw_svg"]

EdgeKind = Literal["edge", "join", "conditional", "dynamic"]
NodeKind = Literal["start", "end", "node", "dynamic", "subgraph"]


@dataclass(slots=True, kw_only=True)
class _Node:
    name: str
    """The graph's name for it (START and END for the virtual ends)."""
    id: str
    """A Mermaid-safe identifier."""
    label: str
    kind: NodeKind
    layer: int = 0
    order: float = 0.0


@dataclass(slots=True, kw_only=True)
class _Edge:
    src: str
    dst: str
    kind: EdgeKind
    labels: list[str] = field(default_factory=list)
    back: bool = False
    """The edge closes a loop (it points to an earlier layer)."""

    @property
    def label(self) -> str:
        return ", ".join(self.labels)


@dataclass(slots=True, kw_only=True)
class _Layout:
    nodes: dict[str, _Node]
    edges: list[_Edge]
    layers: list[list[str]]


_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_MERMAID_WORDS = frozenset(
    {"end", "graph", "subgraph", "flowchart", "click", "style", "class", "classdef", "linkstyle"}
)


def _edges_of(spec: GraphSpec) -> list[_Edge]:  # noqa: PLR0912 - each kind of edge (static, join, router, Send) in one pass
    found: dict[tuple[str, str, EdgeKind], _Edge] = {}

    def add(src: str, dst: str, kind: EdgeKind, label: str | None = None) -> None:
        edge = found.setdefault((src, dst, kind), _Edge(src=src, dst=dst, kind=kind))
        if label and label not in edge.labels:
            edge.labels.append(label)

    for src, targets in spec.edges.items():
        for dst in targets:
            add(src, dst, "edge")
    for join in spec.joins:
        for src in sorted(join.sources):
            add(src, join.target, "join", "join")
    dynamic_sources: list[str] = []
    for src, routers in spec.routers.items():
        for router in routers:
            if router.path_map is None:
                dynamic_sources.append(src)
                continue
            for key, dst in router.path_map.items():
                add(src, dst, "conditional", None if str(key) == dst else str(key))
    for node in spec.nodes.values():
        for dst in node.destinations or ():
            add(node.name, dst, "conditional", "goto")
    if dynamic_sources:
        led_to = {e.dst for e in found.values()}
        orphans = [n for n in spec.nodes if n not in led_to]
        for source in dict.fromkeys(dynamic_sources):
            dests = [n for n in orphans if n != source] or [_dynamic_marker(source)]
            for dst in dests:
                add(source, dst, "dynamic", "dynamic")
    return list(found.values())


def _dynamic_marker(src: str) -> str:
    return f"\x00dynamic:{src}"


def _layout(spec: GraphSpec) -> _Layout:  # noqa: PLR0912, PLR0915 - the layered layout in one pass, as the algorithm reads
    edges = _edges_of(spec)
    names = [START, *spec.nodes]
    names += [e.dst for e in edges if e.dst.startswith("\x00") and e.dst not in names]
    succ: dict[str, list[str]] = {n: [] for n in [*names, END]}
    for e in edges:
        succ[e.src].append(e.dst)

    # Depth-first from START (then from anything left) to find the edges that close loops.
    state: dict[str, int] = {}  # 1 on the stack, 2 finished
    back: set[tuple[str, str]] = set()
    for root in names:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            if i < len(succ[node]):
                stack[-1] = (node, i + 1)
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                stack.pop()
    for e in edges:
        e.back = (e.src, e.dst) in back

    # Longest path from START over the forward edges (Kahn's order).
    forward = [e for e in edges if not e.back and e.dst != END]
    indeg = dict.fromkeys(names, 0)
    out: dict[str, list[str]] = {n: [] for n in names}
    for e in forward:
        indeg[e.dst] += 1
        out[e.src].append(e.dst)
    layer = dict.fromkeys(names, 0)
    ready = [n for n in names if indeg[n] == 0]
    while ready:
        n = ready.pop(0)
        for m in out[n]:
            layer[m] = max(layer[m], layer[n] + 1)
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
    for name in names:  # a node only reachable dynamically, with no way in: just below START
        if name != START and layer[name] == 0:
            layer[name] = 1
    nodes: dict[str, _Node] = {}
    used: set[str] = set()
    for name in names:
        nodes[name] = _Node(
            name=name, id=_mermaid_id(name, used), label=_label(name), kind=_kind(name, spec), layer=layer[name]
        )
    bottom = max(layer.values(), default=0) + 1  # END is drawn even when no edge reaches it
    nodes[END] = _Node(name=END, id=_mermaid_id(END, used), label="END", kind="end", layer=bottom)
    depth = max(item.layer for item in nodes.values())
    layers: list[list[str]] = [[] for _ in range(depth + 1)]
    for item in nodes.values():
        layers[item.layer].append(item.name)
    _order(layers, nodes, edges)
    rank = {"edge": 0, "join": 1, "conditional": 2, "dynamic": 3}
    edges.sort(
        key=lambda e: (nodes[e.src].layer, nodes[e.src].order, rank[e.kind], nodes[e.dst].layer, nodes[e.dst].order)
    )
    return _Layout(nodes=nodes, edges=edges, layers=layers)


def _order(layers: list[list[str]], nodes: dict[str, _Node], edges: list[_Edge]) -> None:
    """Order each layer by the mean position of its parents (a few barycentre sweeps)."""
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    children: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        if not e.back:
            parents[e.dst].append(e.src)
            children[e.src].append(e.dst)
    for row in layers:
        for i, n in enumerate(row):
            nodes[n].order = float(i)
    for sweep in range(4):
        rows = layers[1:] if sweep % 2 == 0 else list(reversed(layers[:-1]))
        link = parents if sweep % 2 == 0 else children
        for row in rows:
            keyed = []
            for i, n in enumerate(row):
                near = [nodes[p].order for p in link[n]]
                keyed.append((sum(near) / len(near) if near else nodes[n].order, i, n))
            keyed.sort()
            row[:] = [n for _, _, n in keyed]
            for i, n in enumerate(row):
                nodes[n].order = float(i)


def _kind(name: str, spec: GraphSpec) -> NodeKind:
    if name == START:
        return "start"
    if name == END:
        return "end"
    if name.startswith("\x00"):
        return "dynamic"
    node = spec.nodes.get(name)
    return "subgraph" if node is not None and isinstance(node.fn, SubgraphNode) else "node"


def _label(name: str) -> str:
    if name == START:
        return "START"
    if name == END:
        return "END"
    return "dynamic" if name.startswith("\x00") else name


def _mermaid_id(name: str, used: set[str]) -> str:
    if name in (START, END) or (_IDENT.fullmatch(name) and name.lower() not in _MERMAID_WORDS):
        ident = name
    else:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name.replace("\x00", "")).strip("_") or "node"
        ident = "n_" + base
    candidate, i = ident, 1
    while candidate in used:
        i += 1
        candidate = f"{ident}_{i}"
    used.add(candidate)
    return candidate


# -- Mermaid ---------------------------------------------------------------------------------


def _mermaid_text(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def draw_mermaid(spec: GraphSpec, *, xray: bool = False) -> str:
    """The graph as a Mermaid flowchart (paste it into any Markdown that renders Mermaid).

    Static edges are solid arrows, joins thick arrows labelled ``join``, conditional edges
    dashed arrows labelled with the router's return values, and routers without a path_map
    dashed arrows labelled ``dynamic``. A subgraph node is a box with double sides; with
    ``xray`` it is expanded into a Mermaid ``subgraph`` block showing its own graph (nested
    subgraphs too), its node ids prefixed with the node's.
    """
    lines = ["flowchart TD", *_mermaid_body(spec, "", "    ", xray)]
    lines.append("    classDef terminal fill:#eef,stroke:#446")
    lines.append("    classDef dynamic fill:#fff,stroke:#888,stroke-dasharray:4 3")
    lines.append(f"    classDef nested fill:{SUBGRAPH[0]},stroke:{SUBGRAPH[1]}")
    return "\n".join(lines) + "\n"


def _mermaid_body(spec: GraphSpec, prefix: str, indent: str, xray: bool) -> list[str]:
    lay = _layout(spec)
    lines: list[str] = []
    for row in lay.layers:
        for name in row:
            n = lay.nodes[name]
            text, ident = _mermaid_text(n.label), prefix + n.id
            if n.kind in ("start", "end"):
                lines.append(f"{indent}{ident}([{text}]):::terminal")
            elif n.kind == "dynamic":
                lines.append(f"{indent}{ident}{{{{{text}}}}}:::dynamic")
            elif n.kind == "subgraph" and xray:
                fn = spec.nodes[name].fn
                assert isinstance(fn, SubgraphNode)
                lines.append(f"{indent}subgraph {ident}[{text}]")
                lines += _mermaid_body(fn.runner.spec, ident + "__", indent + "    ", xray)
                lines.append(f"{indent}end")
            elif n.kind == "subgraph":
                lines.append(f"{indent}{ident}[[{text}]]:::nested")
            else:
                lines.append(f"{indent}{ident}[{text}]")
    for e in lay.edges:
        a, b = prefix + lay.nodes[e.src].id, prefix + lay.nodes[e.dst].id
        label = f"|{_mermaid_text(e.label)}|" if e.label else ""
        arrow = {"edge": "-->", "join": "==>", "conditional": "-.->", "dynamic": "-.->"}[e.kind]
        lines.append(f"{indent}{a} {arrow}{label} {b}")
    return lines


# -- ASCII -----------------------------------------------------------------------------------


def _box(n: _Node) -> str:
    if n.kind in ("start", "end"):
        return f"({n.label})"
    if n.kind == "dynamic":
        return "<dynamic>"
    if n.kind == "subgraph":
        return f"[[{n.label}]]"
    return f"[{n.label}]"


def draw_ascii(spec: GraphSpec) -> str:
    """A plain-text sketch: the nodes layer by layer (one layer per line, top to bottom),
    then every edge with its kind.

    Arrows: ``-->`` a static edge, ``==>`` one source of a join, ``-.->`` a conditional
    edge (with the router's return values in brackets), ``~~>`` a dynamic route
    (a router without a path_map: Send or any node).
    """
    lay = _layout(spec)
    rows = ["   ".join(_box(lay.nodes[n]) for n in row) for row in lay.layers]
    width = max((len(r) for r in rows), default=0)
    out: list[str] = []
    for i, row in enumerate(rows):
        out.append(row.center(width).rstrip())
        if i < len(rows) - 1:
            out.append("|".center(width).rstrip())
            out.append("v".center(width).rstrip())
    out.append("")
    names = {n.name: n.label for n in lay.nodes.values()}
    arrows = {"edge": "-->", "join": "==>", "conditional": "-.->", "dynamic": "~~>"}
    for e in lay.edges:
        line = f"  {names[e.src]} {arrows[e.kind]} {names[e.dst]}"
        notes = []
        if e.kind == "join":
            notes.append("join: waits for all its sources")
        elif e.label:
            notes.append(e.label)
        if e.back:
            notes.append("loop")
        if notes:
            line += f"  [{'; '.join(notes)}]"
        out.append(line)
    return "\n".join(out) + "\n"


# -- SVG -------------------------------------------------------------------------------------

_CHAR_W = 7.2
_NODE_H = 34.0
_GAP_X = 36.0
_GAP_Y = 64.0
_MARGIN = 24.0
SUBGRAPH = ("#eef0fb", "#4b4f9e")
"""A subgraph node's fill and border: unlike the Studio's next (amber) and running (green) marks."""
_COLOURS: dict[EdgeKind, str] = {"edge": "#333", "join": "#1f5fa8", "conditional": "#8a5a00", "dynamic": "#7a2e8a"}


def _width(n: _Node) -> float:
    return max(64.0, len(n.label) * _CHAR_W + 28.0)


def draw_svg(spec: GraphSpec) -> str:
    """A standalone SVG of the graph (no external fonts, scripts or links).

    Nodes are boxes (START and END pills, a dynamic marker a dashed box); every node has one
    ``<text>`` with its name; edges follow the same conventions as :func:`draw_mermaid`,
    with a short legend at the bottom.
    """
    lay = _layout(spec)
    widths = {name: _width(n) for name, n in lay.nodes.items()}
    row_w = [sum(widths[n] for n in row) + _GAP_X * (len(row) - 1) for row in lay.layers]
    total_w = max([*row_w, 360.0]) + 2 * _MARGIN + 80.0  # room on the right for loop arcs
    total_w = max(total_w, _LEGEND_W + 2 * _MARGIN)
    pos: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(lay.layers):
        x = _MARGIN + (total_w - 80.0 - 2 * _MARGIN - row_w[r]) / 2
        y = _MARGIN + r * (_NODE_H + _GAP_Y)
        for name in row:
            pos[name] = (x + widths[name] / 2, y + _NODE_H / 2)
            x += widths[name] + _GAP_X
    legend_y = _MARGIN + len(lay.layers) * (_NODE_H + _GAP_Y) - _GAP_Y / 2
    total_h = legend_y + 40.0 + _LEGEND_ROW * (len(_LEGEND) - 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="sans-serif" font-size="12">',
        "<defs>",
        *(
            f'<marker id="arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
            for kind, colour in _COLOURS.items()
        ),
        "</defs>",
        '<rect class="bg" width="100%" height="100%" fill="#ffffff"/>',
    ]
    parts += list(_svg_edges(lay, pos, widths, total_w))
    for name, n in lay.nodes.items():
        parts.append(_svg_node(n, pos[name], widths[name]))
    parts += _svg_legend(legend_y)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _svg_edges(
    lay: _Layout, pos: dict[str, tuple[float, float]], widths: dict[str, float], total_w: float
) -> Iterable[str]:
    half = _NODE_H / 2
    for i, e in enumerate(lay.edges):
        (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
        colour = _COLOURS[e.kind]
        style = f'stroke="{colour}" fill="none" marker-end="url(#arrow-{e.kind})"'
        style += ' stroke-width="2.5"' if e.kind == "join" else ' stroke-width="1.3"'
        if e.kind in ("conditional", "dynamic"):
            style += ' stroke-dasharray="6 4"'
        if e.back or y2 <= y1:
            # A loop: leave from the right side and come back in on the right side.
            sx, ex = x1 + widths[e.src] / 2, x2 + widths[e.dst] / 2
            bend = min(total_w - 8.0, max(sx, ex) + 30.0 + 6.0 * (i % 4))
            d = f"M{sx:.1f},{y1:.1f} C{bend:.1f},{y1:.1f} {bend:.1f},{y2:.1f} {ex:.1f},{y2:.1f}"
            lx, ly = bend - 4.0, (y1 + y2) / 2
        else:
            sy, ey = y1 + half, y2 - half
            my = (sy + ey) / 2
            d = f"M{x1:.1f},{sy:.1f} C{x1:.1f},{my:.1f} {x2:.1f},{my:.1f} {x2:.1f},{ey:.1f}"
            lx, ly = (x1 + x2) / 2, my
        yield f'<path class="edge {e.kind}" d="{d}" {style}/>'
        if e.label:
            yield (
                f'<text class="edge-label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle" font-size="11" '
                f'fill="{colour}" paint-order="stroke" stroke="#fff" stroke-width="3">{escape(e.label)}</text>'
            )


def _svg_node(n: _Node, centre: tuple[float, float], width: float) -> str:
    cx, cy = centre
    x, y = cx - width / 2, cy - _NODE_H / 2
    if n.kind in ("start", "end"):
        shape = (
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{_NODE_H:.0f}" rx="{_NODE_H / 2:.0f}" '
            'fill="#e8ecfa" stroke="#446"/>'
        )
    elif n.kind == "dynamic":
        shape = (
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{_NODE_H:.0f}" rx="4" '
            'fill="#fff" stroke="#7a2e8a" stroke-dasharray="4 3"/>'
        )
    elif n.kind == "subgraph":  # a graph of its own: a double border, in a colour no run marker uses
        shape = (
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{_NODE_H:.0f}" rx="6" '
            f'fill="{SUBGRAPH[0]}" stroke="{SUBGRAPH[1]}"/>'
            f'<rect class="inner" x="{x + 3:.1f}" y="{y + 3:.1f}" width="{width - 6:.1f}" height="{_NODE_H - 6:.0f}" '
            f'rx="4" fill="none" stroke="{SUBGRAPH[1]}"/>'
        )
    else:
        shape = (
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{_NODE_H:.0f}" rx="6" '
            'fill="#fdf6e3" stroke="#555"/>'
        )
    text = f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle" fill="#111">{escape(n.label)}</text>'
    return f'<g class="node {n.kind}" data-name="{escape(n.label, {chr(34): "&quot;"})}">{shape}{text}</g>'


_LEGEND: list[list[tuple[EdgeKind, str]]] = [
    [("edge", "edge"), ("join", "join (waits for all)")],
    [("conditional", "conditional"), ("dynamic", "dynamic (Send)")],
]
"""The legend's rows: two entries a row keeps a narrow graph's drawing narrow."""
_LEGEND_ROW = 20.0
_LEGEND_W = max(sum(44 + len(text) * 6.6 for _, text in row) for row in _LEGEND)
"""How wide the legend is: the drawing is never narrower (an entry would be cut off)."""


def _svg_legend(top: float) -> list[str]:
    out = ['<g class="legend" font-size="11">']
    for r, row in enumerate(_LEGEND):
        x, y = _MARGIN, top + r * _LEGEND_ROW
        for kind, text in row:
            colour = _COLOURS[kind]
            dash = ' stroke-dasharray="6 4"' if kind in ("conditional", "dynamic") else ""
            width = "2.5" if kind == "join" else "1.3"
            out.append(
                f'<line class="{kind}" x1="{x:.0f}" y1="{y:.0f}" x2="{x + 28:.0f}" y2="{y:.0f}" stroke="{colour}" '
                f'stroke-width="{width}"{dash}/>'
            )
            out.append(f'<text class="legend-label" x="{x + 34:.0f}" y="{y + 4:.0f}" fill="#444">{escape(text)}</text>')
            x += 44 + len(text) * 6.6
    out.append("</g>")
    return out


def draw_json(spec: GraphSpec) -> dict[str, Any]:
    """The graph as nodes and edges in the JSON shape the LangGraph API serves at
    ``GET /assistants/{id}/graph`` (what its clients draw): ``__start__``/``__end__`` as
    nodes, a conditional edge marked ``"conditional": true`` with its label as ``data``."""
    edges = [
        {
            "source": e.src,
            "target": e.dst,
            **({"conditional": True} if e.kind in ("conditional", "dynamic") else {}),
            **({"data": e.label} if e.labels else {}),
        }
        for e in _edges_of(spec)
    ]
    names = dict.fromkeys([START, *spec.nodes, *(e["target"] for e in edges), END])
    nodes = [{"id": n, "type": "schema" if n in (START, END) else "runnable", "data": n} for n in names]
    return {"nodes": nodes, "edges": edges}
