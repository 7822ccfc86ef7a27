"""A compiled graph's binding: where its threads are stored and what steers its runs, and
``bind()``, which changes that and keeps every other option.

The graph facade is three classes, one job each: :class:`BoundGraph` (this: options and
binding), :class:`~plait.graph.running.Running` (running: ``invoke``/``stream``) and
:class:`~plait.graph.compiled.CompiledGraph` (drawing, inspecting and editing threads).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, Final, Self

from plait.checkpoint.address import coerce_checkpointer
from plait.checkpoint.base import Checkpointer
from plait.engine.executor import NodeExecutor
from plait.engine.options import Binding, RunHooks
from plait.engine.spec import GraphSpec
from plait.errors import MissingNodeError, NoCheckpointerError
from plait.graph.closing import Closing
from plait.store import Store
from plait.tracing import require_opentelemetry

__all__ = ["BoundGraph", "breakpoints"]

EVERY_NODE: Final = "*"


def breakpoints(names: Iterable[str], nodes: Iterable[str]) -> frozenset[str]:
    """The nodes ``names`` pauses at: ``"*"`` (alone, or as a list's only name) is every node.

    Raises:
        MissingNodeError: a name that is not one of ``nodes``.
    """
    known = tuple(nodes)
    chosen = frozenset([names] if isinstance(names, str) else names)
    if EVERY_NODE in chosen:
        return frozenset(known)
    for n in sorted(chosen):
        if n not in known:
            raise MissingNodeError(n, known)
    return chosen


class _Keep:
    """``bind()``'s default: keep what the graph has (None is a value: no checkpointer, no hooks)."""

    def __repr__(self) -> str:
        return "<keep>"


_KEEP: Final = _Keep()


def _store_for(store: Store | bool | None, checkpointer: Checkpointer | None) -> Store | None:
    """``compile(store=...)``: a Store, None, or True for the checkpointer's own (``cp.store``).

    Raises:
        NoCheckpointerError: ``store=True`` without a checkpointer.
        StoreUnsupportedError: ``store=True`` on a checkpointer that keeps no memory.
    """
    if store is True:
        if checkpointer is None:
            raise NoCheckpointerError("store=True (the checkpointer's own memory store)")
        return checkpointer.store
    if store is False or store is None:
        return None
    if not isinstance(store, Store):
        raise TypeError(f"store={store!r}: give a plait.Store, True for the checkpointer's own, or None")
    return store


class BoundGraph(Closing):
    """A validated graph and its binding (see :class:`~plait.engine.options.Binding`)."""

    def __init__(
        self,
        spec: GraphSpec,
        *,
        checkpointer: Checkpointer | str | None = None,
        namespace: str = "",
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        name: str = "Graph",
        executor: NodeExecutor | None = None,
        hooks: RunHooks | None = None,
        store: Store | bool | None = None,
        tracing: bool = False,
    ) -> None:
        if tracing:
            require_opentelemetry()
        cp = coerce_checkpointer(checkpointer)
        self._bind(
            spec,
            name,
            Binding(
                checkpointer=cp,
                store=_store_for(store, cp),
                namespace=namespace,
                interrupt_before=breakpoints(interrupt_before, spec.nodes),
                interrupt_after=breakpoints(interrupt_after, spec.nodes),
                executor=executor,
                hooks=hooks,
                tracing=tracing,
            ),
        )

    def _bind(self, spec: GraphSpec, name: str, binding: Binding, fingerprint: str | None = None) -> None:
        self.spec = spec
        self.name = name
        self.binding = binding
        """Every option of the graph but its spec and name (see :meth:`bind`)."""
        self.fingerprint = fingerprint or spec.fingerprint[:16]
        self._setup_done = False
        if (binding.interrupt_before or binding.interrupt_after) and binding.checkpointer is None:
            raise NoCheckpointerError("interrupt_before / interrupt_after")

    def bind(
        self,
        *,
        checkpointer: Checkpointer | str | _Keep | None = _KEEP,
        namespace: str | _Keep = _KEEP,
        hooks: RunHooks | _Keep | None = _KEEP,
        interrupt_before: Iterable[str] | _Keep = _KEEP,
        interrupt_after: Iterable[str] | _Keep = _KEEP,
        store: Store | bool | _Keep | None = _KEEP,
    ) -> Self:
        """The same graph with another checkpointer, namespace, hooks, breakpoints or memory
        store, keeping every other option (executor, name): how a worker, the Studio and the
        CLI run a user's graph on their own store, and how the API server runs it with a
        request's ``interrupt_before`` and its own memory store. The graph itself is not
        changed. A breakpoint of ``"*"`` (or ``["*"]``) is every node of the graph. A
        checkpointer's own memory store follows it to the new checkpointer unless ``store``
        names another (``True``: the new checkpointer's own, as ``compile(store=True)``).

        Raises:
            MissingNodeError: a breakpoint names a node the graph does not have.
        """
        binding = self.binding
        if not isinstance(interrupt_before, _Keep):
            binding = replace(binding, interrupt_before=self._nodes_named(interrupt_before))
        if not isinstance(interrupt_after, _Keep):
            binding = replace(binding, interrupt_after=self._nodes_named(interrupt_after))
        if not isinstance(checkpointer, _Keep):
            cp = coerce_checkpointer(checkpointer)
            moved = binding.store
            if moved is not None and moved.backend is binding.checkpointer and cp is not binding.checkpointer:
                # the memory lives with the checkpoints: it follows them to the new store
                moved = moved.over(cp) if cp is not None and cp.capabilities.memory else None
            binding = replace(binding, checkpointer=cp, store=moved)
        if not isinstance(store, _Keep):
            binding = replace(binding, store=_store_for(store, binding.checkpointer))
        if not isinstance(namespace, _Keep):
            binding = replace(binding, namespace=namespace)
        if not isinstance(hooks, _Keep):
            binding = replace(binding, hooks=hooks)
        bound = type(self).__new__(type(self))
        bound._bind(self.spec, self.name, binding, self.fingerprint)
        # the same store was set up already: a worker rebinding per run pays no setup per run
        bound._setup_done = self._setup_done and binding.checkpointer is self.checkpointer
        return bound

    def _nodes_named(self, names: Iterable[str]) -> frozenset[str]:
        return breakpoints(names, self.spec.nodes)

    @property
    def checkpointer(self) -> Checkpointer | None:
        return self.binding.checkpointer

    @property
    def namespace(self) -> str:
        return self.binding.namespace

    @property
    def interrupt_before(self) -> frozenset[str]:
        return self.binding.interrupt_before

    @property
    def interrupt_after(self) -> frozenset[str]:
        return self.binding.interrupt_after

    @property
    def executor(self) -> NodeExecutor | None:
        """Where sync nodes run (None: the process's shared thread pool); see
        :class:`plait.engine.executor.NodeExecutor`."""
        return self.binding.executor

    @property
    def hooks(self) -> RunHooks | None:
        return self.binding.hooks

    @property
    def schema(self) -> Any:
        return self.spec.schema

    def __repr__(self) -> str:
        return (
            f"<CompiledGraph {self.name} nodes={list(self.spec.nodes)} checkpointer={type(self.checkpointer).__name__}>"
        )

    async def _ready_checkpointer(self) -> Checkpointer:
        if self.checkpointer is None:
            raise NoCheckpointerError("threads, history and state editing")
        if not self._setup_done:
            await self.checkpointer.asetup()
            self._setup_done = True
        return self.checkpointer
