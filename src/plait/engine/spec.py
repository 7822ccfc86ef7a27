"""The compiled shape of a graph: nodes, edges, joins and routers, frozen for the engine.

The builders (:mod:`plait.graph.builder`) produce a :class:`GraphSpec`; the planner and the
loop read it and never change it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from plait._codec import fingerprint
from plait.errors import GraphError, NodeSignatureError
from plait.state.managed import ManagedKind
from plait.state.models import ModelState
from plait.state.schema import StateSchema
from plait.types import CachePolicy, RetryPolicy

__all__ = ["GraphSpec", "Join", "Lineage", "NodeSpec", "RouterSpec", "SubgraphRunner", "takes_context"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """One node: the user's callable and how to call it."""

    name: str
    fn: Callable[..., Any]
    takes_ctx: bool
    """Whether ``fn`` accepts a second positional argument (the NodeContext)."""
    is_async: bool
    output_key: str | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    destinations: tuple[str, ...] | None = None
    """Where a node that routes by Command may go (for validation and drawings)."""
    defer: bool = False
    """Run once the run has no other task pending (``add_node(..., defer=True)``)."""
    raw_state: bool = False
    """Give the node the state as a mapping even when the schema is a model (a subgraph,
    which maps channels by name)."""
    cache_policy: CachePolicy | None = None
    """Cache its result by its input, when the graph is compiled with a cache
    (:mod:`plait.engine.caching`)."""
    send_model: ModelState | None = None
    """The Pydantic model or dataclass the node's first parameter is annotated with: a
    ``Send``'s argument (stored as JSON) reaches the node as an instance of it, as the
    instance sent reaches a LangGraph node."""

    def sent_arg(self, arg: Any) -> Any:
        """What the node gets of a ``Send``'s stored argument."""
        return arg if self.send_model is None else self.send_model.sent(arg, self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterSpec:
    """A conditional edge: ``fn(state)`` picks the next node(s) after ``source``."""

    source: str
    fn: Callable[..., Any]
    path_map: Mapping[Any, str] | None
    is_async: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Join:
    """``add_edge([a, b], c)``: ``target`` runs once, after every source has finished."""

    id: str
    sources: frozenset[str]
    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Lineage:
    """A versioned graph's name, version and migrations (``compile(version=...)``): what its
    checkpoints record, and how a thread written by an older version is carried over."""

    name: str
    """The compiled graph's name (``compile(name=...)``), recorded as ``graph_name``."""
    version: int
    """The graph's version, recorded as ``graph_version`` (a thread without one is version 1)."""
    migrations: Mapping[int, Callable[..., Any]] = field(default_factory=dict)
    """``{n: fn}``: carries a thread from version ``n`` to ``n + 1`` (a missing step is the
    identity); see :mod:`plait.engine.migrating`."""

    @classmethod
    def of(cls, name: str, version: int | None, migrations: Mapping[int, Callable[..., Any]] | None) -> Lineage | None:
        """``compile(version=..., migrations=...)`` checked (None: an unversioned graph).

        Raises:
            GraphError: a version that is not a whole number from 1, migrations without a
                version, or a migration that is not callable or not for a step below it.
        """
        if version is None:
            if migrations:
                raise GraphError("compile(migrations=...) needs the graph's version= (the version they migrate to)")
            return None
        if type(version) is not int or version < 1:
            raise GraphError(f"compile(version={version!r}): a version is a whole number from 1")
        steps = dict(migrations or {})
        for n, fn in steps.items():
            if type(n) is not int or not 1 <= n < version:
                raise GraphError(
                    f"compile(migrations={{{n!r}: ...}}): a migration is keyed by the version it migrates from, "
                    f"a whole number from 1 to {version - 1} (migrations[n] carries a thread from n to n + 1)"
                )
            if not callable(fn):
                raise GraphError(f"compile(migrations={{{n}: {fn!r}}}): a migration is a function fn(values)")
        return cls(name=name, version=version, migrations=steps)


@dataclass(frozen=True, kw_only=True)
class GraphSpec:
    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    edges: Mapping[str, tuple[str, ...]]
    """Static successors: source (a node or START) -> targets (nodes or END)."""
    joins: tuple[Join, ...] = ()
    routers: Mapping[str, tuple[RouterSpec, ...]] = field(default_factory=dict)
    joins_by_source: Mapping[str, tuple[Join, ...]] = field(default_factory=dict)
    writers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    context_schema: type | None = None
    """The type of a run's ``context=`` (``Graph(State, context=Ctx)``); None: any value."""
    input_schema: StateSchema | None = None
    """The fields a run's input may set (``Graph(State, input_schema=In)``); None: all."""
    output_schema: StateSchema | None = None
    """The fields ``invoke`` returns (``Graph(State, output_schema=Out)``); None: all."""
    lineage: Lineage | None = None
    """The graph's name, version and migrations when compiled with ``version=`` (None: an
    unversioned graph, whose checkpoints record neither). Not part of :attr:`fingerprint`:
    a version names the data's shape, the fingerprint the graph's."""
    managed: Mapping[str, ManagedKind] = field(default_factory=dict)
    """The state's managed fields (``RemainingSteps``, ``IsLastStep``) by name: computed for
    each step (see :mod:`plait.state.managed`), never stored, so not part of the fingerprint."""

    def describe(self) -> dict[str, Any]:
        """JSON data describing the structure (nodes, edges, joins, routers, channels)."""
        return {
            "nodes": sorted(self.nodes),
            "edges": {k: list(v) for k, v in sorted(self.edges.items())},
            "joins": [[sorted(j.sources), j.target] for j in self.joins],
            "routers": {k: [_router_name(r) for r in v] for k, v in sorted(self.routers.items())},
            "channels": self.schema.describe(),
        }

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.describe())

    @functools.cached_property
    def defers(self) -> bool:
        """Whether any node is deferred (most graphs have none, and skip holding tasks back)."""
        return any(n.defer for n in self.nodes.values())

    @functools.cached_property
    def names_messages(self) -> bool:
        """Whether a channel names the messages written to it (most graphs have none, and
        skip naming a task's writes)."""
        return any(c.reducer.assigns_ids for c in self.schema)

    @functools.cached_property
    def reducer_specs(self) -> Mapping[str, Any]:
        """Each channel's reducer spec, as checkpoint metadata records them (shared by every
        checkpoint of the graph: never mutate it)."""
        return {c.key: c.reducer.spec() for c in self.schema}


def _router_name(r: RouterSpec) -> str:
    name = getattr(r.fn, "__qualname__", type(r.fn).__name__)
    if r.path_map is not None:
        name += "->" + ",".join(sorted(str(v) for v in r.path_map.values()))
    return name


def takes_context(fn: Callable[..., Any], node: str = "") -> bool:
    """True when ``fn`` wants the NodeContext: a second positional parameter without a
    default, or one named ``ctx`` / ``context`` (a defaulted ``i=i`` is not a context).

    Raises:
        NodeSignatureError: the second parameter is named ``config`` (a LangGraph node, which
            would silently get a NodeContext where it expects a RunnableConfig).
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2:
        second = positional[1]
        if second.name == "config":
            raise NodeSignatureError(node or getattr(fn, "__name__", repr(fn)), second.name)
        return second.default is inspect.Parameter.empty or second.name in ("ctx", "context")
    return any(p.kind is p.VAR_POSITIONAL for p in params)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an instance with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


@dataclass(frozen=True, slots=True)
class SubgraphRunner:
    """What a parent needs to run a compiled graph as a subgraph (its spec, fingerprint and
    breakpoints)."""

    spec: GraphSpec
    graph_fp: str
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
