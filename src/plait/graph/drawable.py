"""``get_graph()``: the graph's structure as one object to draw or walk, as LangGraph's is.

LangGraph's ``app.get_graph()`` returns LangChain's drawable graph (``nodes``, ``edges``,
``draw_mermaid()``, ``draw_ascii()``, ``draw_mermaid_png()``). :class:`GraphDrawing` keeps
those names over plait's own drawings (:mod:`plait.graph.draw`), which need no network. A PNG
is made from the SVG by ``cairosvg`` when it is installed (``pip install 'plait[draw]'``);
without it ``draw_png`` raises :class:`~plait.errors.DrawingUnavailableError` rather than
sending the graph to a web service, as LangGraph's ``draw_mermaid_png()`` does by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plait.engine.spec import GraphSpec
from plait.errors import DrawingUnavailableError
from plait.graph.draw import draw_ascii, draw_json, draw_mermaid, draw_svg

__all__ = ["DrawnEdge", "DrawnNode", "GraphDrawing"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DrawnNode:
    """A node of the drawing (``__start__`` and ``__end__`` included), as LangGraph's ``Node``."""

    id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DrawnEdge:
    """An edge of the drawing, with LangGraph's ``Edge`` fields."""

    source: str
    target: str
    data: str | None = None
    """The label: a path_map's return value, ``join``, ``goto``, ``dynamic`` (None: none)."""
    conditional: bool = False
    """A route a router or a ``Command`` may take (dashed), not a static edge."""


@dataclass(frozen=True, slots=True)
class GraphDrawing:
    """A compiled graph's structure, to draw or to walk: ``app.get_graph().draw_mermaid()``."""

    spec: GraphSpec
    xray: bool = False
    """Whether :meth:`draw_mermaid` expands each subgraph inside its node."""

    @property
    def nodes(self) -> dict[str, DrawnNode]:
        """The nodes by id, START and END included."""
        return {n["id"]: DrawnNode(id=n["id"], name=n["data"]) for n in self.to_json()["nodes"]}

    @property
    def edges(self) -> list[DrawnEdge]:
        """The edges, sorted by source, then target (the order LangGraph lists them in)."""
        edges = [
            DrawnEdge(
                source=e["source"], target=e["target"], data=e.get("data"), conditional=e.get("conditional", False)
            )
            for e in self.to_json()["edges"]
        ]
        return sorted(edges, key=lambda e: (e.source, e.target))

    def to_json(self) -> dict[str, Any]:
        """``{"nodes": [...], "edges": [...]}``, the shape LangGraph's API serves for a graph."""
        return draw_json(self.spec)

    def draw_mermaid(self) -> str:
        """Mermaid flowchart text (subgraphs expanded with ``get_graph(xray=True)``)."""
        return draw_mermaid(self.spec, xray=self.xray)

    def draw_ascii(self) -> str:
        """A plain-text sketch, layer by layer."""
        return draw_ascii(self.spec)

    def draw_svg(self) -> str:
        """A standalone SVG; no network and no graphviz."""
        return draw_svg(self.spec)

    def draw_png(self, output_file_path: str | Path | None = None) -> bytes:
        """The SVG drawing as PNG bytes, also written to ``output_file_path`` when given.

        Raises:
            DrawingUnavailableError: cairosvg (or the cairo library it loads) is missing.
        """
        try:
            import cairosvg  # type: ignore[import-untyped, import-not-found, unused-ignore]
        except (ImportError, OSError) as exc:  # OSError: cairosvg present, the cairo library not
            raise DrawingUnavailableError("draw_png()", str(exc)) from exc
        png: bytes = cairosvg.svg2png(bytestring=self.draw_svg().encode("utf-8"))
        if output_file_path is not None:
            Path(output_file_path).write_bytes(png)
        return png

    def draw_mermaid_png(self, output_file_path: str | Path | None = None) -> bytes:
        """LangGraph's name for a PNG of the graph: :meth:`draw_png` (drawn here, offline,
        never sent to mermaid.ink)."""
        return self.draw_png(output_file_path)
