"""Loading ``MODULE:GRAPH`` for the command line: the loader lives in
:mod:`plait.graph.loading`, so that workers (:mod:`plait.runs`) find graphs by the same names."""

from plait.graph.loading import load_graph, load_target

__all__ = ["load_graph", "load_target"]
