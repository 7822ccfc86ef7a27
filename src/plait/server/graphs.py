"""The graph picture: plait's own SVG, with a thread's next nodes and running nodes marked.

The SVG comes from :mod:`plait.graph.draw` (no JS layout library); marking a node rewrites
the fill and stroke of its box, found by the ``data-name`` attribute the drawing gives every
node group, so the picture stays one standalone document with no styles or scripts.
"""

from __future__ import annotations

import html
import re

from plait import inspect as ins
from plait.graph.compiled import CompiledGraph
from plait.server.studio import Studio

__all__ = ["graph_svg", "mark_nodes"]

NEXT = ("#ffe7a3", "#b07800")
RUNNING = ("#b9f0c0", "#1c7c2c")


async def graph_svg(studio: Studio, app: CompiledGraph, thread_id: str | None, namespace: str) -> str:
    """The graph's SVG; with ``thread_id``, its head's next nodes and the nodes a run started
    here is running now marked (running wins)."""
    svg = app.draw_svg()
    if thread_id is None:
        return svg
    head = await ins.get_checkpoint(studio.checkpointer, thread_id, namespace=namespace)
    running = studio.studio_runs.running_nodes(thread_id, namespace)
    return mark_nodes(
        svg, {n: NEXT for n in ins.next_nodes(head) if n not in running} | dict.fromkeys(running, RUNNING)
    )


def mark_nodes(svg: str, colours: dict[str, tuple[str, str]]) -> str:
    """``svg`` with the box of each named node filled and outlined in the given colours."""
    for name, (fill, stroke) in colours.items():
        attr = html.escape(name, quote=True)
        pattern = re.compile(
            r'(<g class="node [a-z]+" data-name="' + re.escape(attr) + r'"><rect [^>]*?)fill="[^"]*" stroke="[^"]*"'
        )
        state = "running" if (fill, stroke) == RUNNING else "next"
        replacement = f'\\g<1>fill="{fill}" stroke="{stroke}" stroke-width="3"'
        svg = pattern.sub(replacement, svg, count=1)
        svg = svg.replace(f'data-name="{attr}">', f'data-name="{attr}" data-state="{state}">', 1)
    return svg
