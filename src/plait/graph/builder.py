"""Graph and Dag: the builders. Both compile to the same CompiledGraph.

Validation happens in :meth:`Graph.compile`, so a graph that compiles has no edge to an
unknown node, no node unreachable from START (where routing is known statically), no
reserved or duplicate names, and no ``output_key`` that is not a channel.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from plait.engine.spec import GraphSpec, Join, Lineage, NodeSpec, RouterSpec, is_async_callable, takes_context
from plait.errors import GraphError
from plait.graph.bound import BoundGraph, breakpoints
from plait.graph.subgraph import SubgraphNode
from plait.state.managed import ManagedKind, managed_fields
from plait.state.models import first_param_model
from plait.state.schema import StateSchema
from plait.types import END, START, CachePolicy, RetryPolicy

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.checkpoint.cache import NodeCache
    from plait.engine.executor import NodeExecutor
    from plait.graph.compiled import CompiledGraph
    from plait.store import Store

__all__ = ["Dag", "Graph"]

_RESERVED = (START, END)


class Graph:
    """A graph of nodes over a state schema, run in super-steps.

    Example:
        >>> g = Graph(schema)
        >>> g.add_node("plan", plan).add_node("act", act)
        >>> g.add_edge(START, "plan").add_edge("plan", "act").add_edge("act", END)
        >>> app = g.compile(checkpointer="plait.db")
    """

    def __init__(
        self,
        schema: StateSchema | type,
        *,
        context: type | None = None,
        input_schema: StateSchema | type | None = None,
        output_schema: StateSchema | type | None = None,
    ) -> None:
        """Args:
        schema: the state: a TypedDict, a StateSchema, a Pydantic model or a dataclass
            (its fields are the channels, and writes are validated by it).
        context: the type of a run's ``invoke(..., context=...)`` (a dataclass, a
            TypedDict, a pydantic model): a dict given there is made into it (a TypedDict
            stays a dict), and nodes read it as ``ctx.context``.
        input_schema: what ``invoke`` takes (a TypedDict, a model, a dataclass): keys of
            the input that are not its fields are dropped, as in LangGraph.
        output_schema: what ``invoke`` returns: only its fields (and the model itself
            with ``invoke(..., output_model=True)``).
        """
        self.schema, self.managed = _split_managed(schema)
        self.context_schema = context
        self.input_schema = None if input_schema is None else _io_schema(self.schema, input_schema, "input_schema")
        self.output_schema = None if output_schema is None else _io_schema(self.schema, output_schema, "output_schema")
        self._nodes: dict[str, NodeSpec] = {}
        self._edges: dict[str, list[str]] = {}
        self._joins: list[Join] = []
        self._routers: dict[str, list[RouterSpec]] = {}

    # -- building ------------------------------------------------------------------------

    def add_node(
        self,
        name: str | Callable[..., Any],
        fn: Callable[..., Any] | CompiledGraph | Graph | None = None,
        *,
        output_key: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        destinations: Sequence[str] | None = None,
        defer: bool = False,
        cache_policy: CachePolicy | None = None,
    ) -> Graph:
        """Add a node: ``fn(state)`` or ``fn(state, ctx)``, sync or async, or a compiled
        graph (or a Graph builder): a subgraph sharing this graph's channels by name, with
        its checkpoints in a child namespace of the thread (see :mod:`plait.graph.subgraph`).
        ``add_node(fn)`` names it after the function (``fn.__name__``).

        Args:
            output_key: write a plain return value under this channel.
            retry: retry the node on failure (see RetryPolicy).
            timeout: seconds before the node fails with NodeTimeoutError.
            destinations: where the node may route with ``Command(goto=...)``, for
                validation and drawings.
            defer: when triggered, wait until the run has no other task pending, then run
                once (a reduce after a fan-out of branches of different lengths).
            cache_policy: keep the node's result by its input in the graph's cache
                (``compile(cache=...)``); a node whose key is cached returns the stored
                writes without running. Not for a subgraph: cache its nodes instead.
        """
        if fn is None and callable(name):
            fn = name
            name = _node_name(fn)
        if not isinstance(name, str) or not name:
            raise GraphError(f"a node name is a non-empty str, got {name!r}")
        if name in _RESERVED or name.startswith("__"):
            raise GraphError(f"node name {name!r} is reserved (names starting with '__' belong to plait)")
        if name in self._nodes:
            raise GraphError(f"node {name!r} is added twice; node names are unique")
        if isinstance(fn, BoundGraph | Graph):  # a graph as a node: a subgraph sharing channels by name
            if cache_policy is not None:
                raise GraphError(
                    f"node {name!r} is a subgraph, which keeps steps, interrupts and state of its own that a "
                    "cached result would skip: give its nodes a cache_policy instead (they use this graph's cache)"
                )
            fn = SubgraphNode(fn, self.schema)
        if cache_policy is not None and not isinstance(cache_policy, CachePolicy):
            raise GraphError(f"node {name!r}: cache_policy={cache_policy!r} is not a plait.CachePolicy")
        if not callable(fn):
            raise GraphError(f"node {name!r}: {fn!r} is not callable")
        if timeout is not None and timeout <= 0:
            raise GraphError(f"node {name!r}: timeout must be positive, got {timeout!r}")
        self._nodes[name] = NodeSpec(
            name=name,
            fn=fn,
            takes_ctx=takes_context(fn, name),
            is_async=is_async_callable(fn),
            output_key=output_key,
            retry=retry,
            timeout=timeout,
            destinations=tuple(destinations) if destinations is not None else None,
            defer=defer,
            raw_state=isinstance(fn, SubgraphNode),
            cache_policy=cache_policy,
            send_model=None if isinstance(fn, SubgraphNode) else first_param_model(fn),
        )
        return self

    def add_edge(self, source: str | Sequence[str], target: str) -> Graph:
        """``target`` runs after ``source``; with a list of sources, it runs once, in the
        super-step after the last of them finished (a join)."""
        if isinstance(source, str):
            self._edges.setdefault(source, [])
            if target not in self._edges[source]:
                self._edges[source].append(target)
            return self
        sources = list(source)
        if not sources:
            raise GraphError("add_edge([...], target) needs at least one source")
        if len(sources) == 1:
            return self.add_edge(sources[0], target)
        if START in sources or END in sources:
            raise GraphError("a join's sources are nodes, not START or END")
        join_id = "join:" + ",".join(sorted(sources)) + "->" + target
        if any(j.id == join_id for j in self._joins):
            return self
        self._joins.append(Join(id=join_id, sources=frozenset(sources), target=target))
        return self

    def add_conditional_edges(
        self,
        source: str,
        router: Callable[..., Any],
        path_map: Mapping[Any, str] | Sequence[str] | None = None,
    ) -> Graph:
        """After ``source``, call ``router(state)`` to choose what runs next.

        The router sees the state as of the start of the super-step plus ``source``'s own
        writes. It returns a node name, a list of names, ``Send``\\ s, or END; with
        ``path_map`` its return value is looked up there first (a list means those names
        map to themselves).
        """
        if not callable(router):
            raise GraphError(f"the router of {source!r} is not callable")
        pm: Mapping[Any, str] | None
        if path_map is None:
            pm = None
        elif isinstance(path_map, Mapping):
            pm = dict(path_map)
        else:
            pm = {name: name for name in path_map}
        spec = RouterSpec(source=source, fn=router, path_map=pm, is_async=is_async_callable(router))
        self._routers.setdefault(source, []).append(spec)
        return self

    def set_entry_point(self, node: str) -> Graph:
        """Same as ``add_edge(START, node)``."""
        return self.add_edge(START, node)

    def set_finish_point(self, node: str) -> Graph:
        """Same as ``add_edge(node, END)``."""
        return self.add_edge(node, END)

    def add_sequence(self, nodes: Sequence[Callable[..., Any] | tuple[str, Callable[..., Any]]]) -> Graph:
        """Add nodes that run one after the other, each with an edge to the next: functions
        (named after themselves) or ``(name, fn)`` pairs. Connect the first and the last
        yourself (``add_edge(START, first)``, ``add_edge(last, END)``)."""
        if not nodes:
            raise GraphError("add_sequence() needs at least one node")
        names = []
        for item in nodes:
            name, fn = item if isinstance(item, tuple) else (_node_name(item), item)
            self.add_node(name, fn)
            names.append(name)
        for a, b in itertools.pairwise(names):
            self.add_edge(a, b)
        return self

    # -- compiling -----------------------------------------------------------------------

    def spec(self) -> GraphSpec:
        """Validate and freeze the structure."""
        self._validate()
        writers: dict[str, list[str]] = {}
        for node in self._nodes.values():
            if node.output_key:
                writers.setdefault(node.output_key, []).append(node.name)
        joins_by_source: dict[str, list[Join]] = {}
        for j in self._joins:
            for s in sorted(j.sources):
                joins_by_source.setdefault(s, []).append(j)
        return GraphSpec(
            schema=self.schema,
            nodes=dict(self._nodes),
            edges={k: tuple(v) for k, v in self._edges.items()},
            joins=tuple(self._joins),
            routers={k: tuple(v) for k, v in self._routers.items()},
            joins_by_source={k: tuple(v) for k, v in joins_by_source.items()},
            writers={k: tuple(v) for k, v in writers.items()},
            context_schema=self.context_schema,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            managed=dict(self.managed),
        )

    def compile(
        self,
        checkpointer: Checkpointer | str | None = None,
        *,
        namespace: str = "",
        interrupt_before: Iterable[str] = (),
        interrupt_after: Iterable[str] = (),
        name: str | None = None,
        executor: NodeExecutor | None = None,
        store: Store | bool | None = None,
        tracing: bool = False,
        version: int | None = None,
        migrations: Mapping[int, Callable[..., Any]] | None = None,
        cache: NodeCache | bool | None = None,
    ) -> CompiledGraph:
        """Validate the graph and return a runnable :class:`CompiledGraph`.

        Args:
            checkpointer: a Checkpointer, a store address (a path to a SQLite file, the
                embedded default; ``sqlite:///x.db``, a ``postgresql://`` DSN,
                ``file:///folder``, ``memory:``; see :func:`plait.checkpoint.open`), or None
                to run without persistence.
            namespace: keeps this graph's threads apart from other graphs' in one store.
            interrupt_before / interrupt_after: nodes to pause before / after (breakpoints);
                ``"*"`` is every node.
            executor: where sync nodes run: anything with ``submit(fn)``, such as a
                ``concurrent.futures.ThreadPoolExecutor`` of your own (a worker's bounded
                pool); None runs them in the process's shared thread pool.
            store: the long-term memory store nodes reach as ``ctx.store``: a
                :class:`plait.Store`, or True for the checkpointer's own (``cp.store``). In
                the checkpointer's database, a step's memory writes commit in its
                transaction; in another store they are applied right before it.
            tracing: trace this graph's runs with OpenTelemetry's global tracer provider even
                while :func:`plait.instrument` is off (see docs/tracing.md); raises
                ``TracingUnavailableError`` without OpenTelemetry's API installed.
            version: the graph's version (a whole number from 1), recorded with its threads
                with its ``name``; a thread written by an older version (or before versions,
                which is version 1) is migrated when a run resumes it. None records no
                version (a thread is then taken as version 1 when compared).
            migrations: ``{n: fn}``, how a thread of version ``n`` becomes ``n + 1``:
                ``fn(values) -> values``, or ``fn(values, next) -> (values, next)`` to rename
                the nodes the thread waits in (see docs/operating.md). A missing step is the
                identity; the result is checked as any resume of a changed graph is.
            cache: where nodes with a ``cache_policy`` keep their results: a
                :class:`plait.MemoryCache`, a :class:`plait.Cache` (a checkpointer's), or
                True for the checkpointer's own (``checkpointer.cache``).

        Raises:
            GraphError: the graph breaks a rule (named), or a bad ``version``/``migrations``.
        """
        from plait.graph.compiled import CompiledGraph

        spec = self.spec()
        lineage = Lineage.of(name or type(self).__name__, version, migrations)
        if lineage is not None:
            spec = replace(spec, lineage=lineage)
        before = tuple(sorted(breakpoints(interrupt_before, spec.nodes)))
        after = tuple(sorted(breakpoints(interrupt_after, spec.nodes)))
        return CompiledGraph(
            spec,
            checkpointer=checkpointer,
            namespace=namespace,
            interrupt_before=before,
            interrupt_after=after,
            name=name or type(self).__name__,
            executor=executor,
            store=store,
            tracing=tracing,
            cache=cache,
        )

    def _validate(self) -> None:  # noqa: PLR0912 - every rule a graph must keep, each with its own message
        nodes = self._nodes
        if not nodes:
            raise GraphError("the graph has no nodes; add_node() at least one")
        known = tuple(nodes)
        for o, n in (("output_key", s.output_key) for s in nodes.values()):
            if n is not None and n not in self.schema:
                raise GraphError(
                    f"a node's {o} {n!r} is not a channel; the schema declares: {', '.join(self.schema.keys)}"
                )
        for source, targets in self._edges.items():
            if source != START and source not in nodes:
                raise GraphError(f"edge from unknown node {source!r}; the nodes are: {', '.join(known)}")
            for t in targets:
                if t == START:
                    raise GraphError(f"edge {source!r} -> START: START cannot be a target")
                if t != END and t not in nodes:
                    raise GraphError(
                        f"edge {source!r} -> {t!r} goes to an unknown node; the nodes are: {', '.join(known)}"
                    )
        for j in self._joins:
            for s in j.sources:
                if s not in nodes:
                    raise GraphError(f"join {j.id!r} waits for unknown node {s!r}")
            if j.target not in nodes and j.target != END:
                raise GraphError(f"join {j.id!r} goes to unknown node {j.target!r}")
        for source, routers in self._routers.items():
            if source not in nodes and source != START:
                raise GraphError(f"conditional edges from unknown node {source!r}")
            for r in routers:
                for t in (r.path_map or {}).values():
                    if t != END and t not in nodes:
                        raise GraphError(f"the path_map of {source!r} names unknown node {t!r}")
        for spec in nodes.values():
            for t in spec.destinations or ():
                if t != END and t not in nodes:
                    raise GraphError(f"node {spec.name!r} lists unknown destination {t!r}")
        if not self._edges.get(START) and not self._routers.get(START):
            raise GraphError(
                "the graph has no entry point: add_edge(START, 'first_node') or add_conditional_edges(START, router)"
            )
        self._check_reachable()

    def _check_reachable(self) -> None:
        """Every node must be reachable from START, unless some reachable node routes to
        places we cannot know (a router without path_map)."""
        succ: dict[str, set[str]] = {}
        for s, ts in self._edges.items():
            succ.setdefault(s, set()).update(ts)
        for j in self._joins:
            for s in j.sources:
                succ.setdefault(s, set()).add(j.target)
        for spec in self._nodes.values():
            if spec.destinations:
                succ.setdefault(spec.name, set()).update(spec.destinations)
        seen: set[str] = set()
        stack = [START]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            for r in self._routers.get(n, ()):
                if r.path_map is None:
                    return  # dynamic routing: anything may be reachable
                stack.extend(r.path_map.values())
            stack.extend(succ.get(n, ()))
        unreachable = [n for n in self._nodes if n not in seen]
        if unreachable:
            raise GraphError(
                "unreachable from START: "
                + ", ".join(repr(n) for n in unreachable)
                + ". Connect them with add_edge / add_conditional_edges, give a router a path_map, or "
                "list Command targets in add_node(..., destinations=[...])."
            )


def _io_schema(state: StateSchema, declared: StateSchema | type, what: str) -> StateSchema:
    """An input or output schema, whose fields must all be channels of the state."""
    io = StateSchema.coerce(declared)
    extra = [k for k in io.keys if k not in state]
    if extra:
        raise GraphError(
            f"{what}: {', '.join(repr(k) for k in extra)} {'is' if len(extra) == 1 else 'are'} not "
            f"a field of the state ({', '.join(state.keys)}); an {what} names some of the state's fields"
        )
    return io


def _node_name(fn: Callable[..., Any]) -> str:
    """The name ``add_node(fn)`` gives a node: the function's (a lambda has none worth keeping)."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or name == "<lambda>":
        raise GraphError(f"cannot name a node after {fn!r}: give it a name, add_node('name', fn)")
    return name


class Dag:
    """A static DAG: every step waits for all its predecessors.

    Super-steps are the topological layers (longest path from the roots); steps of one layer
    run concurrently. ``Dag(schema).step("a", fa).step("b", fb).edge("a", "b").compile()``.
    """

    def __init__(self, schema: StateSchema | type) -> None:
        self.schema, self.managed = _split_managed(schema)
        self._steps: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}
        self._edges: list[tuple[str, str]] = []

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        output_key: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        cache_policy: CachePolicy | None = None,
    ) -> Dag:
        if name in self._steps:
            raise GraphError(f"step {name!r} is added twice; step names are unique")
        opts = {"output_key": output_key, "retry": retry, "timeout": timeout, "cache_policy": cache_policy}
        self._steps[name] = (fn, opts)
        return self

    def edge(self, before: str, after: str) -> Dag:
        """``after`` waits for ``before``."""
        for n in (before, after):
            if n not in self._steps:
                raise GraphError(f"edge {before!r} -> {after!r}: unknown step {n!r}; add it with .step() first")
        if (before, after) not in self._edges:
            self._edges.append((before, after))
        return self

    def layers(self) -> list[list[str]]:
        """The super-steps: steps grouped by longest path from a root. Raises GraphError
        naming a cycle if there is one."""
        preds: dict[str, list[str]] = {n: [] for n in self._steps}
        for a, b in self._edges:
            preds[b].append(a)
        depth: dict[str, int] = {}
        visiting: list[str] = []

        def visit(n: str) -> int:
            if n in depth:
                return depth[n]
            if n in visiting:
                # visiting runs against the edges (each entry waits for the next): reverse it
                cycle = [n, *reversed(visiting[visiting.index(n) :])]
                raise GraphError("the Dag has a cycle: " + " -> ".join(cycle))
            visiting.append(n)
            d = 1 + max((visit(p) for p in preds[n]), default=-1)
            visiting.pop()
            depth[n] = d
            return d

        for n in self._steps:
            visit(n)
        out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for n in self._steps:
            out[depth[n]].append(n)
        return out

    def to_graph(self) -> Graph:
        if not self._steps:
            raise GraphError("the Dag has no steps; add them with .step(name, fn)")
        self.layers()  # refuse cycles, naming one
        g = Graph(self.schema)
        g.managed = self.managed
        for name, (fn, opts) in self._steps.items():
            g.add_node(name, fn, **opts)
        preds: dict[str, list[str]] = {n: [] for n in self._steps}
        for a, b in self._edges:
            preds[b].append(a)
        for name, ps in preds.items():
            g.add_edge(ps if ps else START, name)
        return g

    def compile(
        self,
        checkpointer: Checkpointer | str | None = None,
        *,
        namespace: str = "",
        interrupt_before: Iterable[str] = (),
        interrupt_after: Iterable[str] = (),
        executor: NodeExecutor | None = None,
        store: Store | bool | None = None,
        tracing: bool = False,
        version: int | None = None,
        migrations: Mapping[int, Callable[..., Any]] | None = None,
        cache: NodeCache | bool | None = None,
    ) -> CompiledGraph:
        return self.to_graph().compile(
            checkpointer,
            namespace=namespace,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            executor=executor,
            name="Dag",
            store=store,
            tracing=tracing,
            version=version,
            migrations=migrations,
            cache=cache,
        )


def _split_managed(declared: StateSchema | type) -> tuple[StateSchema, dict[str, ManagedKind]]:
    """The schema of ``declared`` without its managed fields (``RemainingSteps``,
    ``IsLastStep``: computed each step, never stored), and those fields."""
    schema = StateSchema.coerce(declared)
    managed = {k: v for k, v in managed_fields(declared).items() if k in schema}
    if managed:
        model = schema.model.without(managed) if schema.model is not None else None
        schema = StateSchema({k: c for k, c in schema.channels.items() if k not in managed}, model)
    return schema, managed
