"""Building graphs (Graph, Dag) and running them (CompiledGraph)."""

from plait.graph.builder import Dag, Graph
from plait.graph.compiled import CompiledGraph
from plait.graph.records import TaskState, ThreadState
from plait.inspect import ThreadDiff

__all__ = ["CompiledGraph", "Dag", "Graph", "TaskState", "ThreadDiff", "ThreadState"]
