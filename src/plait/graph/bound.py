"""A compiled graph's binding: where its threads are stored and what steers its runs, and
``bind()``, which changes that and keeps every other option.

The graph facade is three classes, one job each: :class:`BoundGraph` (this: options and
binding), :class:`~plait.graph.running.Running` (running: ``invoke``/``stream``) and
:class:`~plait.graph.compiled.CompiledGraph` (drawing, inspecting and editing threads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Final, Self, TypeVar

from plait.checkpoint.address import coerce_checkpointer
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.cache import Cache, NodeCache
from plait.engine.executor import NodeExecutor
from plait.engine.options import Binding, RunHooks
from plait.engine.spec import GraphSpec
from plait.errors import CacheUnsupportedError, MissingNodeError, NoCheckpointerError
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


T = TypeVar("T")


def _given_or_own(
    option: str,
    value: T | bool | None,
    checkpointer: Checkpointer | None,
    kind: type[T],
    own: Callable[[Checkpointer], T],
    forms: str,
) -> T | None:
    """``compile(store=...)`` and ``compile(cache=...)``: a ``kind``, None, or True for the
    checkpointer's own (``own(cp)``: ``cp.store``, ``cp.cache``).

    Raises:
        NoCheckpointerError: True without a checkpointer.
        TypeError: anything else (``forms`` says what may be given).
    """
    if value is True:
        if checkpointer is None:
            raise NoCheckpointerError(f"{option}=True (the checkpointer's own)")
        return own(checkpointer)
    if value is False or value is None:
        return None
    if not isinstance(value, kind):
        raise TypeError(f"{option}={value!r}: give {forms}, True for the checkpointer's own, or None")
    return value


def _store_for(store: Store | bool | None, checkpointer: Checkpointer | None) -> Store | None:
    """``compile(store=...)``; raises StoreUnsupportedError for True on a checkpointer that
    keeps no memory."""
    return _given_or_own("store", store, checkpointer, Store, lambda cp: cp.store, "a plait.Store")


def _cache_for(cache: NodeCache | bool | None, checkpointer: Checkpointer | None) -> NodeCache | None:
    """``compile(cache=...)``; raises CacheUnsupportedError for True on a checkpointer that
    keeps no cache."""
    forms = "a plait.MemoryCache(), a plait.Cache(checkpointer)"
    return _given_or_own("cache", cache, checkpointer, NodeCache, lambda cp: cp.cache, forms)  # type: ignore[type-abstract]


def _own_cache(checkpointer: Checkpointer | None) -> NodeCache | None:
    """The checkpointer's own cache, or None (no checkpointer, or one that keeps none)."""
    try:
        return checkpointer.cache if checkpointer is not None else None
    except CacheUnsupportedError:
        return None


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
        cache: NodeCache | bool | None = None,
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
                cache=_cache_for(cache, cp),
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
            kept = binding.cache
            if isinstance(kept, Cache) and kept.checkpointer is binding.checkpointer and cp is not kept.checkpointer:
                kept = _own_cache(cp)  # the checkpointer's cache follows it, as its memory does
            binding = replace(binding, checkpointer=cp, store=moved, cache=kept)
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
