"""A compiled graph (or a Graph builder) added as a node of another: the node side of subgraphs.

The subgraph shares the parent's channels by name: its input is the parent's values of the
channels both schemas have, channels only the subgraph has stay private to it (stored in its
own namespace, see :mod:`plait.engine.subgraph`), and what it returns to the parent is what it
changed of the shared channels, written through the parent's reducers. So that a parent's
appending reducer does not see the items it passed in a second time, a changed value is
written back as what it added: the new items of a list that still starts with the items
passed in, the difference of a ``Sum``, the new or changed messages of a message channel;
any other change writes the subgraph's final value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plait.engine.caching import node_namespace
from plait.engine.context import NodeContext, next_subgraph_call
from plait.engine.spec import SubgraphRunner
from plait.engine.subgraph import child_namespace, run_subgraph
from plait.errors import GraphError
from plait.graph.bound import BoundGraph
from plait.graph.records import ThreadState
from plait.state.reducers import AppendMessages, LastWriteWins, Sum
from plait.state.schema import StateSchema

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.checkpoint.model import Checkpoint
    from plait.engine.spec import GraphSpec

__all__ = [
    "SubgraphNode",
    "call_subgraph",
    "nested_states",
    "subgraph_target",
    "runner_of",
    "write_back",
]


def runner_of(graph: Any) -> tuple[BoundGraph, SubgraphRunner]:
    """The compiled graph (a builder is compiled, without a checkpointer) and how to run it.
    A builder is told by not being compiled yet: this module sits below both classes."""
    compiled: BoundGraph = graph if isinstance(graph, BoundGraph) else graph.compile()
    runner = SubgraphRunner(
        spec=compiled.spec,
        graph_fp=compiled.fingerprint,
        interrupt_before=compiled.interrupt_before,
        interrupt_after=compiled.interrupt_after,
    )
    return compiled, runner


class SubgraphNode:
    """The node function of a subgraph: runs it on the shared channels, in the child
    namespace of the task, and writes back what it changed of them."""

    def __init__(self, graph: Any, parent: StateSchema) -> None:
        self.graph, self.runner = runner_of(graph)
        self.parent = parent
        self.shared = tuple(k for k in self.runner.spec.schema.keys if k in parent)
        """The channels of both schemas, in the subgraph's order."""

    async def __call__(self, state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        given = {k: state[k] for k in self.shared if k in state}
        result = await run_subgraph(ctx, self.runner, given)
        return write_back(self.parent, given, {k: v for k, v in result.values.items() if k in self.parent})


def write_back(parent: StateSchema, before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The writes that bring the parent's shared channels from ``before`` (what the subgraph
    was given) to ``after`` (what it ended with), through the parent's reducers."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        if key in before and before[key] == value:
            continue
        reducer = parent.channel(key).reducer
        old = before.get(key)
        if key not in before or isinstance(reducer, LastWriteWins):
            out[key] = value
        elif isinstance(value, list) and isinstance(old, list) and value[: len(old)] == old:
            out[key] = list(value[len(old) :])
        elif isinstance(reducer, Sum) and _number(value) and _number(old):
            out[key] = value - old
        elif isinstance(reducer, AppendMessages) and isinstance(value, list) and isinstance(old, list):
            out[key] = [m for m in value if m not in old]
        else:
            out[key] = value
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


async def call_subgraph(ctx: NodeContext, graph: Any, input: Any) -> dict[str, Any]:
    """A node's explicit call of a subgraph (``ctx.subgraph(g, x)``, or ``await
    g.ainvoke(x)`` inside a node): the subgraph's final values. The ``n``-th call of a task
    runs in namespace ``...|node:task_id#n``, so a re-run of the task (in the same order)
    finds each call's checkpoints again."""
    if not isinstance(input, Mapping):
        raise TypeError(f"a subgraph call takes a mapping of channel values, got {input!r}")
    _, runner = runner_of(graph)
    n = next_subgraph_call(ctx)
    result = await run_subgraph(ctx, runner, input, segment=f"{ctx.node}:{ctx.task_id}#{n}")
    return dict(result.values)


async def nested_states(checkpointer: Checkpointer, cp: Checkpoint, spec: GraphSpec) -> dict[str, ThreadState]:
    """The stored state of each subgraph the next tasks of ``cp`` run (added as nodes), by
    ``"node:task_id"``, each with its own subgraphs filled in."""
    from dataclasses import replace

    out: dict[str, ThreadState] = {}
    for task in cp.next_tasks:
        node = spec.nodes.get(task.node)
        if node is None or not isinstance(node.fn, SubgraphNode):
            continue
        child = await checkpointer.aget(cp.thread_id, namespace=child_namespace(cp.namespace, task.node, task.id))
        if child is not None:
            inner = await nested_states(checkpointer, child, node.fn.runner.spec)
            out[f"{task.node}:{task.id}"] = replace(ThreadState.of(child), subgraphs=inner)
    return out


def subgraph_target(
    spec: GraphSpec, graph_fp: str, namespace: str, path: str | Sequence[str]
) -> tuple[GraphSpec, str, str]:
    """The graph, fingerprint and namespace of the subgraph at ``path`` (``"node:task_id"``
    segments, as :attr:`ThreadState.subgraphs` and ``stream(subgraphs=True)`` name them; a
    ``|``-joined str or a tuple), below the graph ``spec`` in ``namespace``.

    Raises:
        GraphError: a segment names no subgraph node (or a subgraph a node calls explicitly,
            whose graph only the node knows).
    """
    segments = path.split("|") if isinstance(path, str) else list(path)
    if not segments:
        raise GraphError("a subgraph path needs at least one 'node:task_id' segment")
    for segment in segments:
        node_name, _, task = segment.partition(":")
        node = spec.nodes.get(node_name)
        if node is None or not task or not isinstance(node.fn, SubgraphNode):
            raise GraphError(
                f"{segment!r} names no subgraph of this graph: give 'node:task_id' of a node added as a "
                "compiled graph, as get_state(thread, subgraphs=True).subgraphs names them"
            )
        spec, graph_fp = node.fn.runner.spec, node.fn.runner.graph_fp
        namespace = f"{namespace}|{segment}" if namespace else segment
    return spec, graph_fp, namespace


def cached_namespaces(spec: GraphSpec) -> set[str]:
    """The cache namespaces of the nodes with a ``cache_policy`` in ``spec`` and in its
    subgraphs, at any depth (a subgraph's nodes use the cache of the graph running them)."""
    found = {node_namespace(n) for n in spec.nodes.values() if n.cache_policy is not None}
    for n in spec.nodes.values():
        if isinstance(n.fn, SubgraphNode):
            found |= cached_namespaces(n.fn.runner.spec)
    return found
