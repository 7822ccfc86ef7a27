"""``@plait.entrypoint``: a plain function as a durable workflow.

An entrypoint is a compiled plait graph of one node, the function, over three channels:
``input`` (what ``invoke`` was given), ``output`` (what the function returned) and
``previous`` (what it saved: the return value, or ``entrypoint.final(save=...)``), which the
next run on the thread gets as its ``previous`` parameter. Its threads are ordinary threads
(checkpointers, leases, statuses, the CLI and workers see that graph, :attr:`Entrypoint.graph`);
this facade only speaks in the function's terms: ``invoke`` returns the return value,
``get_state().values`` is it, ``update_state(thread, value)`` sets it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypedDict, TypeVar

from plait._aliases import either
from plait._frozen import thaw
from plait._sync import iterate_sync, run_sync
from plait.engine.context import NodeContext
from plait.engine.emitter import INTERRUPT_KEY
from plait.errors import EntrypointSignatureError
from plait.graph.closing import Closing
from plait.graph.records import ThreadState
from plait.types import END, START, Command, RetryPolicy

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.checkpoint.cache import NodeCache
    from plait.engine.executor import NodeExecutor
    from plait.graph.compiled import CompiledGraph
    from plait.store import Store

__all__ = ["Entrypoint", "entrypoint"]

R = TypeVar("R")
S = TypeVar("S")

_INJECTED = frozenset({"previous", "ctx", "store", "writer"})


class EntrypointState(TypedDict, total=False):
    """The channels of an entrypoint's threads."""

    input: Any
    output: Any
    previous: Any


class entrypoint:
    """Make a function a durable workflow: ``@plait.entrypoint(checkpointer=...)``.

    The function takes its input as its first parameter and may ask, by name, for
    ``previous`` (the value the thread saved last: the last return value, or
    ``entrypoint.final(save=...)``; None on a new thread), ``ctx`` (the
    :class:`~plait.NodeContext`: ``ctx.context``, ``ctx.store``, ``ctx.once``, ``ctx.emit``,
    ``ctx.stream_message``), ``store`` (``ctx.store``, None without one) and ``writer``
    (``ctx.emit``). It may be sync or async; the :func:`task` calls it makes are durable
    steps, and ``interrupt()`` pauses it. The result is an :class:`Entrypoint`.
    """

    @dataclasses.dataclass(frozen=True, slots=True)
    class final(Generic[R, S]):
        """Return ``value`` to the caller and save ``save`` as the thread's ``previous``."""

        value: R
        save: S

    def __init__(
        self,
        checkpointer: Checkpointer | str | None = None,
        *,
        store: Store | bool | None = None,
        context_schema: type | None = None,
        name: str | None = None,
        namespace: str = "",
        retry: RetryPolicy | None = None,
        executor: NodeExecutor | None = None,
        tracing: bool = False,
        cache: NodeCache | bool | None = None,
    ) -> None:
        """Args:
        checkpointer: where its threads are stored (any of ``compile()``'s forms); None runs
            without persistence (no ``previous``, no resume).
        store: the long-term memory store (``ctx.store``), as ``compile(store=...)``.
        context_schema: the type of ``invoke(..., context=...)`` (``ctx.context``).
        name: the workflow's name (its node's and graph's; default: the function's).
        namespace: keeps its threads apart from other graphs' in one store.
        retry: how the whole function is retried when it raises (finished tasks replay).
        executor: where a sync function and sync tasks run (default: plait's shared pool).
        tracing: trace its runs with OpenTelemetry (see ``compile(tracing=...)``).
        cache: where tasks with a ``cache_policy`` keep their results (``compile(cache=...)``:
            ``plait.MemoryCache()``, ``plait.Cache(checkpointer)``, or True for the
            checkpointer's own).
        """
        self.checkpointer = checkpointer
        self.store = store
        self.context_schema = context_schema
        self.name = name
        self.namespace = namespace
        self.retry = retry
        self.executor = executor
        self.tracing = tracing
        self.cache = cache

    def __call__(self, fn: Callable[..., Any]) -> Entrypoint:
        from plait.graph.builder import Graph

        name: str = self.name or getattr(fn, "__name__", None) or type(fn).__name__
        node = _node_for(fn, name)
        graph = (
            Graph(EntrypointState, context=self.context_schema)
            .add_node(name, node, retry=self.retry)
            .add_edge(START, name)
            .add_edge(name, END)
            .compile(
                self.checkpointer,
                name=name,
                namespace=self.namespace,
                store=self.store,
                executor=self.executor,
                tracing=self.tracing,
                cache=self.cache,
            )
        )
        return Entrypoint(fn, graph, name)


def _node_for(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The graph node that calls ``fn``: its input and the parameters it asks for in, its
    return value (and what it saves) out as the node's writes."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise EntrypointSignatureError(name, "it is a generator; stream with ctx.emit or writer instead")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise EntrypointSignatureError(name, "its signature cannot be read") from None
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        raise EntrypointSignatureError(name, "it takes no positional parameter for its input")
    wanted = []
    for p in params[1:]:
        if p.name in _INJECTED:
            wanted.append(p.name)
        elif p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise EntrypointSignatureError(name, f"it asks for {p.name!r}, which plait does not inject")

    def arguments(state: Mapping[str, Any], ctx: NodeContext) -> tuple[Any, dict[str, Any]]:
        given: dict[str, Any] = {}
        for w in wanted:
            if w == "previous":
                given[w] = thaw(state.get("previous"))
            elif w == "ctx":
                given[w] = ctx
            elif w == "store":
                given[w] = ctx.store if ctx.memory_store is not None else None
            else:
                given[w] = ctx.emit
        return thaw(state.get("input")), given

    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004

        async def run_async(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
            first, given = arguments(state, ctx)
            return _writes(await fn(first, **given))

        return run_async

    def run(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        first, given = arguments(state, ctx)
        return _writes(fn(first, **given))

    return run


def _writes(result: Any) -> dict[str, Any]:
    if isinstance(result, entrypoint.final):
        return {"output": result.value, "previous": result.save}
    return {"output": result, "previous": result}


def _given(input: Any) -> Any:
    """An entrypoint's input as its graph takes it: None (continue the thread) and a
    ``Command`` as they are, anything else as the ``input`` channel's value."""
    if input is None or isinstance(input, Command):
        return input
    return {"input": input}


def _returned(values: Mapping[str, Any]) -> Any:
    """What ``invoke`` returns: the function's return value, or the pending interrupts."""
    if INTERRUPT_KEY in values:
        return {INTERRUPT_KEY: values[INTERRUPT_KEY]}
    return thaw(values.get("output"))


class Entrypoint(Closing):
    """A workflow made by :class:`entrypoint`: run it with ``invoke``/``stream``, read and
    edit its threads with ``get_state``, ``get_state_history`` and ``update_state``, in the
    function's terms (its input, its return value). Every other method of a compiled graph
    (``list_threads``, ``delete_thread``, ``fork``, ``bind``, ...) works on :attr:`graph`,
    reached through this object too; ``with`` (or ``close()``) closes its checkpointer."""

    def __init__(self, fn: Callable[..., Any], graph: CompiledGraph, node: str) -> None:
        self.func = fn
        """The plain function."""
        self.graph = graph
        """The compiled graph it runs as: what ``plait worker --graph``, the CLI and the
        Studio load from an entrypoint, and what their outputs show (``input``, ``output``
        and ``previous`` channels)."""
        self.node = node
        """Its name, the name of the graph's one node (its ``updates`` stream key)."""

    def __repr__(self) -> str:
        return f"<plait.entrypoint {self.node!r}>"

    @property
    def checkpointer(self) -> Checkpointer | None:
        return self.graph.checkpointer

    @property
    def __plait_graph__(self) -> CompiledGraph:
        """What plait's tooling (the CLI, workers, ``plait serve``) loads in its place."""
        return self.graph

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.graph, attr)

    def bind(self, **options: Any) -> Entrypoint:
        """The same workflow on another checkpointer, namespace or store (the keywords of
        :meth:`CompiledGraph.bind`): a test's in-memory store, say."""
        return Entrypoint(self.func, self.graph.bind(**options), self.node)

    # -- running -------------------------------------------------------------------------

    async def ainvoke(self, input: Any, config: Mapping[str, Any] | None = None, **options: Any) -> Any:
        """Run the function on ``input`` (None: continue the thread; ``Command(resume=...)``:
        answer its ``interrupt()``) and return its return value; a paused run returns
        ``{"__interrupt__": [Interrupt, ...]}`` as LangGraph's does. The keywords are
        :meth:`CompiledGraph.ainvoke`'s (``thread_id``, ``checkpoint_id``, ``context``,
        ``durability``, ...)."""
        return _returned(await self.graph.ainvoke(_given(input), config, **options))

    def invoke(self, input: Any, config: Mapping[str, Any] | None = None, **options: Any) -> Any:
        """Sync :meth:`ainvoke`."""
        return run_sync(self.ainvoke(input, config, **options))

    async def astream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        mode: str | Sequence[str] | None = None,
        stream_mode: str | Sequence[str] | None = None,
        subgraphs: bool = False,
        **options: Any,
    ) -> AsyncIterator[Any]:
        """Run and yield what happens, as :meth:`CompiledGraph.astream` does, in the
        function's terms; the default mode is ``"updates"``, as LangGraph's: ``{task_name:
        result}`` as each task call finishes, then ``{entrypoint_name: return_value}``.
        ``"values"`` yields the return value when the function returns; ``"custom"``,
        ``"messages"`` and ``"events"`` are the graph's."""
        chosen = either("mode", mode, "stream_mode", stream_mode) or "updates"
        modes = (chosen,) if isinstance(chosen, str) else tuple(chosen)
        asked = [*modes, "updates"] if "values" in modes and "updates" not in modes else list(modes)
        one = asked[0] if len(asked) == 1 else None
        returned = False  # the function returned; the next values item holds its return value
        async for raw in self.graph.astream(_given(input), config, mode=one or asked, subgraphs=subgraphs, **options):  # type: ignore[arg-type]
            ns, m, item = _split(raw, one, subgraphs)
            if not ns and isinstance(item, Mapping):
                if m == "updates" and self.node in item:
                    returned = True
                    item = {self.node: thaw(item[self.node]).get("output")}
                elif m == "values" and INTERRUPT_KEY not in item:
                    if not returned:
                        continue
                    returned, item = False, thaw(item.get("output"))
            if m not in modes:
                continue
            if subgraphs:
                yield (ns, item) if isinstance(chosen, str) else (ns, m, item)
            else:
                yield item if isinstance(chosen, str) else (m, item)

    def stream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        mode: str | Sequence[str] | None = None,
        stream_mode: str | Sequence[str] | None = None,
        subgraphs: bool = False,
        **options: Any,
    ) -> Iterator[Any]:
        """Sync :meth:`astream`."""
        yield from iterate_sync(
            self.astream(input, config, mode=mode, stream_mode=stream_mode, subgraphs=subgraphs, **options)
        )

    # -- its threads ---------------------------------------------------------------------

    async def aget_state(
        self, thread_id: str | Mapping[str, Any], checkpoint_id: str | None = None, **options: Any
    ) -> ThreadState:
        """The thread's state (:meth:`CompiledGraph.aget_state`, whose keywords it takes:
        ``default=``, ``subgraphs=``) with ``values`` the function's last return value, as
        LangGraph's ``get_state`` of an entrypoint shows it."""
        state = await self.graph.aget_state(thread_id, checkpoint_id, **options)
        return _as_returned(state) if isinstance(state, ThreadState) else state

    def get_state(
        self, thread_id: str | Mapping[str, Any], checkpoint_id: str | None = None, **options: Any
    ) -> ThreadState:
        """Sync :meth:`aget_state`."""
        return run_sync(self.aget_state(thread_id, checkpoint_id, **options))

    async def aget_state_history(self, thread_id: str | Mapping[str, Any], **options: Any) -> list[ThreadState]:
        """The thread's checkpoints, newest first, each as :meth:`aget_state` shows it."""
        return [_as_returned(s) for s in await self.graph.aget_state_history(thread_id, **options)]

    def get_state_history(self, thread_id: str | Mapping[str, Any], **options: Any) -> list[ThreadState]:
        """Sync :meth:`aget_state_history`."""
        return run_sync(self.aget_state_history(thread_id, **options))

    async def aupdate_state(
        self, thread_id: str | Mapping[str, Any], value: Any, *, checkpoint_id: str | None = None
    ) -> str:
        """Set the thread's value as if the function had returned ``value`` (an
        ``entrypoint.final`` sets the return value and the saved one apart): the next run
        gets it as ``previous``. Returns the new checkpoint's id."""
        return await self.graph.aupdate_state(thread_id, _writes(value), self.node, checkpoint_id=checkpoint_id)

    def update_state(self, thread_id: str | Mapping[str, Any], value: Any, *, checkpoint_id: str | None = None) -> str:
        """Sync :meth:`aupdate_state`."""
        return run_sync(self.aupdate_state(thread_id, value, checkpoint_id=checkpoint_id))


def _split(raw: Any, one: str | None, subgraphs: bool) -> tuple[tuple[str, ...], str, Any]:
    """A graph stream's item as (namespace, mode, item), whichever shape it came in."""
    if subgraphs:
        if one is not None:
            return raw[0], one, raw[1]
        return raw[0], raw[1], raw[2]
    if one is not None:
        return (), one, raw
    return (), raw[0], raw[1]


def _as_returned(state: ThreadState) -> ThreadState:
    return dataclasses.replace(state, values=thaw(state.values.get("output")))
