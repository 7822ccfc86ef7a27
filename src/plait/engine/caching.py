"""A cached node: its key, its stored result, and what a hit gives the step.

What is stored for a node is its writes (before plait names its messages) and its
``Command(goto=...)``, as JSON data: ``{"writes": [[channel, value], ...], "goto": [...]}``,
a ``Send`` as ``{"send": node, "arg": arg}``. Routers are not part of it: they run again on
a hit, on the state with the stored writes (they belong to the graph, not to the node). A
hit's messages are named by the task that uses them, as the node's own writes would be, so a
cached reply written twice in a thread is two messages, not one replaced.

Which results are kept: only those of a node that finished. A failure, an interrupt, a
``Command(graph=Command.PARENT)`` and the run of a task resumed with a value for its
``interrupt()`` are never stored (their outcome depends on more than the input), and a
resumed task does not look the cache up either. A node's ``ctx.store`` writes and its
``ctx.once`` effects are not part of the entry: a hit skips the node, and them with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plait._codec import freeze_send_arg
from plait.checkpoint.cache import MISS, NodeCache, cache_key, fn_identity, lookup, store
from plait.engine.spec import NodeSpec
from plait.state.schema import StateSchema
from plait.types import Send

__all__ = ["NodeCaching", "node_namespace"]


def node_namespace(node: NodeSpec) -> str:
    """The cache namespace of a node: its name, its function's ``module.qualname`` and its
    ``output_key`` (which shapes its writes). Graphs with the same node share its entries,
    as the same function given the same input gives the same result."""
    out = f"node:{node.name}|{fn_identity(node.fn)}"
    return f"{out}|{node.output_key}" if node.output_key is not None else out


def _goto_json(goto: Any, node: str) -> list[Any]:
    """``goto`` as JSON data: a ``Send``'s argument as it is stored (a model's or a
    dataclass's instance as the JSON of its fields)."""
    items = [goto] if isinstance(goto, str | Send) else list(goto or ())
    return [{"send": g.node, "arg": freeze_send_arg(g.arg, g.node, node)} if isinstance(g, Send) else g for g in items]


def _goto_back(items: Any) -> list[Any]:
    return [Send(g["send"], g["arg"]) if isinstance(g, Mapping) else g for g in items]


@dataclass(slots=True)
class NodeCaching:
    """One task's use of the cache: its key, and the hit when there is one."""

    cache: NodeCache
    node: NodeSpec
    namespace: str
    key: str
    hit: tuple[list[tuple[str, Any]], list[Any]] | None = None
    """The stored writes (messages not yet named) and goto, when the key was cached."""

    @classmethod
    async def start(cls, cache: NodeCache, node: NodeSpec, arg: Any, schema: StateSchema) -> NodeCaching:
        """Make the task's key and look it up; an entry whose channels the state no longer
        has (the graph changed) is a miss, replaced when the node finishes.

        Raises:
            CacheKeyError: the key cannot be made (see :func:`~plait.checkpoint.cache.cache_key`).
        """
        assert node.cache_policy is not None
        namespace = node_namespace(node)
        key = cache_key(node.cache_policy, arg, f"node {node.name!r}")
        found = await lookup(cache, namespace, key)
        out = cls(cache, node, namespace, key)
        if found is MISS or not isinstance(found, Mapping):
            return out
        try:
            writes = [(str(k), v) for k, v in found["writes"]]
            goto = _goto_back(found["goto"])
        except (KeyError, TypeError, ValueError):
            return out
        if all(k in schema for k, _ in writes):
            out.hit = (writes, goto)
        return out

    async def keep(self, writes: list[tuple[str, Any]], goto: Any) -> None:
        """Store a finished node's writes (messages not yet named) and goto."""
        assert self.node.cache_policy is not None
        value = {"writes": [[k, v] for k, v in writes], "goto": _goto_json(goto, self.node.name)}
        await store(self.cache, self.node.cache_policy, self.namespace, self.key, value, f"node {self.node.name!r}")
