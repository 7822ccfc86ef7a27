"""Building graphs (Graph, Dag) and running them (CompiledGraph)."""

from plait.graph.builder import Dag, Graph
from plait.graph.compiled import CompiledGraph, MigrationResult
from plait.graph.records import TaskState, ThreadState
from plait.inspect import ThreadDiff

__all__ = ["CompiledGraph", "Dag", "Graph", "MigrationResult", "TaskState", "ThreadDiff", "ThreadState"]
