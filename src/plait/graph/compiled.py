"""CompiledGraph: run a graph, and inspect, edit, fork and replay its threads.

Every method is implemented once, async (``ainvoke``, ``aget_state``, ...); the sync method
of the same name without the ``a`` is a one-line wrapper over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal

from plait._sync import iterate_sync, run_sync
from plait.checkpoint.address import coerce_checkpointer
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Status, ThreadInfo
from plait.engine.context import _current
from plait.engine.edit import fork_thread, update_thread
from plait.engine.emitter import INTERRUPT_KEY
from plait.engine.executor import NodeExecutor
from plait.engine.loop import Run, RunResult
from plait.engine.runtime import coerce_context
from plait.engine.spec import GraphSpec
from plait.engine.subgraph import delete_with_subgraphs, queue_sink
from plait.errors import CheckpointNotFoundError, GraphError, NoCheckpointerError
from plait.graph.closing import REQUIRED as _REQUIRED
from plait.graph.closing import Closing
from plait.graph.records import ThreadState
from plait.inspect import ThreadDiff, diff_threads
from plait.types import Command, Durability

__all__ = ["CompiledGraph", "INTERRUPT_KEY", "coerce_checkpointer"]


StreamMode = Literal["values", "updates", "events", "custom"]
"""What ``stream(mode=...)`` yields (see :meth:`CompiledGraph.astream`)."""


class CompiledGraph(Closing):
    """A validated graph, bound to a checkpointer. Thread-safe to share; each call is a run."""

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
    ) -> None:
        self.spec = spec
        self.executor = executor
        """Where sync nodes run (None: the process's shared thread pool); see
        :class:`plait.engine.executor.NodeExecutor`."""
        self.checkpointer = coerce_checkpointer(checkpointer)
        self.namespace = namespace
        self.interrupt_before = frozenset(interrupt_before)
        self.interrupt_after = frozenset(interrupt_after)
        self.name = name
        self.fingerprint = spec.fingerprint[:16]
        self._setup_done = False
        if (self.interrupt_before or self.interrupt_after) and self.checkpointer is None:
            raise NoCheckpointerError("interrupt_before / interrupt_after")

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

    # -- running -------------------------------------------------------------------------

    async def _run(
        self,
        input: Any,
        *,
        thread_id: str | None,
        checkpoint_id: str | None,
        recursion_limit: int,
        durability: Durability,
        sink: Any = None,
        modes: frozenset[str] = frozenset(),
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> RunResult:
        context = coerce_context(self.spec.context_schema, context)
        checkpointer = None
        if self.checkpointer is not None:
            checkpointer = await self._ready_checkpointer()
            if thread_id is None:
                raise GraphError(
                    "this graph has a checkpointer, so invoke() needs a thread_id: the key its "
                    "checkpoints are stored and resumed under (any string, e.g. a conversation id)"
                )
        elif input is None or checkpoint_id is not None or isinstance(input, Command):
            raise NoCheckpointerError("resuming a run")
        run = Run(
            self.spec,
            checkpointer,
            graph_fp=self.fingerprint,
            thread_id=thread_id,
            namespace=self.namespace,
            durability=durability,
            recursion_limit=recursion_limit,
            interrupt_before=self.interrupt_before,
            interrupt_after=self.interrupt_after,
            sink=sink,
            modes=modes,
            wait=wait,
            owner=owner,
            executor=self.executor,
            context=context,
            metadata=metadata,
            max_concurrency=max_concurrency,
        )
        return await run.execute(input, checkpoint_id)

    async def ainvoke(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> dict[str, Any]:
        """Run the graph to the end (or to an interrupt) and return the final values.

        Args:
            input: a mapping of channel values to start a run with; None to continue the
                thread from its latest checkpoint (after a failure, a crash, a breakpoint)
                or from ``checkpoint_id`` (time travel: a new branch); a
                ``Command(resume=...)`` to answer an ``interrupt()``; a
                ``Command(goto=node, update=...)`` to run ``node`` next instead.
            thread_id: required with a checkpointer; the thread's checkpoints are stored
                and resumed under it.
            durability: ``"sync"`` commits each super-step before the next starts;
                ``"async"`` overlaps commits with the next steps (group commit), and is
                durable when this returns; ``"exit"`` stores only at the end, an
                interrupt or an error.
            wait: seconds to wait for another run that holds the thread (polling until its
                lease is given back or ends) before raising ``ThreadBusyError``; None (the
                default) raises at once. A holder that died on this machine is taken over
                at once, without waiting.
            owner: the name the thread's lease is taken under (a worker passes its claim,
                so an operator sees which worker holds the thread); None mints one from the
                host and the run id.
            context: per-run values for the nodes (``ctx.context``): a model name, a user
                id, a client. Made into the graph's context type when it declares one
                (``Graph(State, context=Ctx)``); never checkpointed, so pass it again on a
                resume.
            metadata: JSON data recorded on every checkpoint this run writes (plait's own
                keys, such as ``source`` and ``step``, win); ``get_state_history(thread,
                filter={...})`` finds them.
            max_concurrency: at most this many tasks of a super-step run at once (a wide
                ``Send`` fan-out against a rate-limited API); None runs them all at once.

        Returns:
            The channel values; when the run paused on ``interrupt()``, the pending
            interrupts are under ``"__interrupt__"``.
        """
        if thread_id is None and self.checkpointer is None and (ctx := _current.get()) is not None:
            # Called inside a node: a subgraph of that node's run (see plait.graph.subgraph).
            from plait.graph.subgraph import call_subgraph

            return await call_subgraph(ctx, self, input)
        result = await self._run(
            input,
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            recursion_limit=recursion_limit,
            durability=durability,
            wait=wait,
            owner=owner,
            context=context,
            metadata=metadata,
            max_concurrency=max_concurrency,
        )
        return _output(result)

    def invoke(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> dict[str, Any]:
        """Sync :meth:`ainvoke`."""
        return run_sync(
            self.ainvoke(
                input,
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                recursion_limit=recursion_limit,
                durability=durability,
                wait=wait,
                owner=owner,
                context=context,
                metadata=metadata,
                max_concurrency=max_concurrency,
            )
        )

    async def astream(
        self,
        input: Any,
        *,
        mode: StreamMode | Sequence[StreamMode] = "values",
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        subgraphs: bool = False,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> AsyncIterator[Any]:
        """Run the graph and yield what happens as it happens.

        Modes: ``"values"`` (the state after the input and after each super-step),
        ``"updates"`` (``{node: writes}`` as each task finishes), ``"events"`` (event
        records: node started / finished / failed, state updated, checkpoint saved,
        interrupted, run finished), ``"custom"`` (what nodes pass to ``ctx.emit``). With a
        list of modes, items come as ``(mode, item)`` pairs. When the run pauses, ``"values"``
        and ``"updates"`` yield ``{"__interrupt__": (Interrupt, ...)}`` last (an empty tuple
        at a breakpoint).

        An ``"updates"`` item's writes are ``{key: value, ...}`` when the task wrote each key
        once; when it wrote a key more than once (a list of pairs, a ``Command`` update with
        repeats), a list of one-key dicts, one per write in the order written, so that no
        write the state got is missing from the item.

        With ``subgraphs=True`` the subgraphs' items come too, each item as ``(namespace,
        item)`` (``(namespace, (mode, item))`` with a list of modes): ``namespace`` is ``()``
        for this graph and a tuple of ``"node:task_id"`` segments for a subgraph, as in
        LangGraph.
        """
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
        for m in modes:
            if m not in ("values", "updates", "events", "custom"):
                raise ValueError(f"unknown stream mode {m!r}: use 'values', 'updates', 'events' or 'custom'")
        queue: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()
        single = isinstance(mode, str)

        sink = queue_sink(queue.put_nowait, subgraphs=subgraphs, single=single)

        async def drive() -> RunResult:
            try:
                return await self._run(
                    input,
                    thread_id=thread_id,
                    checkpoint_id=checkpoint_id,
                    recursion_limit=recursion_limit,
                    durability=durability,
                    sink=sink,
                    modes=frozenset(modes),
                    wait=wait,
                    owner=owner,
                    context=context,
                    metadata=metadata,
                    max_concurrency=max_concurrency,
                )
            finally:
                queue.put_nowait(None)

        task = asyncio.get_running_loop().create_task(drive())
        try:
            while (item := await queue.get()) is not None:
                yield item[1] if single or subgraphs else item
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def stream(
        self,
        input: Any,
        *,
        mode: StreamMode | Sequence[StreamMode] = "values",
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        subgraphs: bool = False,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> Iterator[Any]:
        """Sync :meth:`astream`: items are yielded as the run produces them."""
        yield from iterate_sync(
            self.astream(
                input,
                mode=mode,
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                recursion_limit=recursion_limit,
                durability=durability,
                wait=wait,
                owner=owner,
                subgraphs=subgraphs,
                context=context,
                metadata=metadata,
                max_concurrency=max_concurrency,
            )
        )

    # -- drawing -------------------------------------------------------------------------

    def draw_mermaid(self, *, xray: bool = False) -> str:
        """The graph as Mermaid flowchart text (joins thick, conditional edges dashed,
        subgraphs as double-sided boxes, or expanded into their own graphs with ``xray``)."""
        from plait.graph.draw import draw_mermaid

        return draw_mermaid(self.spec, xray=xray)

    def draw_ascii(self) -> str:
        """A plain-text sketch of the graph, layer by layer."""
        from plait.graph.draw import draw_ascii

        return draw_ascii(self.spec)

    def draw_svg(self) -> str:
        """A standalone SVG of the graph; no network and no graphviz needed."""
        from plait.graph.draw import draw_svg

        return draw_svg(self.spec)

    # -- inspecting ----------------------------------------------------------------------

    async def aget_state(
        self, thread_id: str, checkpoint_id: str | None = None, *, default: Any = _REQUIRED, subgraphs: bool = False
    ) -> ThreadState:
        """The thread's latest state (or the state at ``checkpoint_id``), with how the
        thread stands (:attr:`ThreadState.status`) and the errors stored with it.

        Args:
            default: returned instead of raising when there is no such thread or
                checkpoint (``get_state(t, default=None)``: the restart idiom).
            subgraphs: fill in :attr:`ThreadState.subgraphs`, the state of the subgraphs
                the next step's tasks run (paused or unfinished inside).

        Raises:
            CheckpointNotFoundError: no such thread or checkpoint, and no ``default``.
        """
        checkpointer = await self._ready_checkpointer()
        cp = await checkpointer.aget(thread_id, checkpoint_id, namespace=self.namespace)
        if cp is None:
            if default is not _REQUIRED:
                return default  # type: ignore[no-any-return]
            raise CheckpointNotFoundError(thread_id, checkpoint_id, self.namespace)
        info = await checkpointer.aget_thread(thread_id, namespace=self.namespace)
        state = ThreadState.of(cp, info.status if info is not None else None)
        if subgraphs:
            from plait.graph.subgraph import nested_states

            state = dataclasses.replace(state, subgraphs=await nested_states(checkpointer, cp, self.spec))
        return state

    def get_state(
        self, thread_id: str, checkpoint_id: str | None = None, *, default: Any = _REQUIRED, subgraphs: bool = False
    ) -> ThreadState:
        """Sync :meth:`aget_state`."""
        return run_sync(self.aget_state(thread_id, checkpoint_id, default=default, subgraphs=subgraphs))

    async def ahas_thread(self, thread_id: str) -> bool:
        """Whether the thread has a checkpoint: ``invoke(None if app.has_thread(t) else
        first_input, thread_id=t)`` resumes a thread or starts it."""
        checkpointer = await self._ready_checkpointer()
        return await checkpointer.aget_thread(thread_id, namespace=self.namespace) is not None

    def has_thread(self, thread_id: str) -> bool:
        """Sync :meth:`ahas_thread`."""
        return run_sync(self.ahas_thread(thread_id))

    async def aget_state_history(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ThreadState]:
        """The thread's checkpoints, newest first, following the newest branch."""
        checkpointer = await self._ready_checkpointer()
        return [
            ThreadState.of(cp)
            for cp in await checkpointer.ahistory(
                thread_id, namespace=self.namespace, limit=limit, before=before, filter=filter
            )
        ]

    def get_state_history(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ThreadState]:
        return run_sync(self.aget_state_history(thread_id, limit=limit, before=before, filter=filter))

    async def alist_threads(
        self, *, status: Status | None = None, limit: int | None = None, before: str | None = None
    ) -> list[ThreadInfo]:
        """This graph's threads (of its namespace), most recently active first, filtered by
        ``status`` and paged in the store (see :meth:`Checkpointer.alist_threads`)."""
        checkpointer = await self._ready_checkpointer()
        return await checkpointer.alist_threads(namespace=self.namespace, status=status, limit=limit, before=before)

    def list_threads(
        self, *, status: Status | None = None, limit: int | None = None, before: str | None = None
    ) -> list[ThreadInfo]:
        """Sync :meth:`alist_threads`."""
        return run_sync(self.alist_threads(status=status, limit=limit, before=before))

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete the thread, and the stored runs of the subgraphs its history's tasks ran."""
        await delete_with_subgraphs(await self._ready_checkpointer(), thread_id, self.namespace)

    def delete_thread(self, thread_id: str) -> None:
        run_sync(self.adelete_thread(thread_id))

    async def aprune(self, thread_id: str, *, keep_last: int | None = None, newer_than: str | None = None) -> int:
        checkpointer = await self._ready_checkpointer()
        return await checkpointer.aprune(
            thread_id, keep_last=keep_last, newer_than=newer_than, namespace=self.namespace
        )

    def prune(self, thread_id: str, *, keep_last: int | None = None, newer_than: str | None = None) -> int:
        return run_sync(self.aprune(thread_id, keep_last=keep_last, newer_than=newer_than))

    # -- editing -------------------------------------------------------------------------

    async def aupdate_state(
        self,
        thread_id: str,
        update: Any,
        as_node: str | None = None,
        *,
        subgraph: str | Sequence[str] | None = None,
        checkpoint_id: str | None = None,
    ) -> str:
        """Fold ``update`` (a mapping or (key, value) pairs) through the reducers as a new
        checkpoint (source ``update``) and return its id.

        With ``as_node`` the write counts as that node's: the next tasks become its
        successors (``as_node=END``: none; pending tasks and interrupts are dropped).
        Without it, the next tasks (and any pending results) stay as they were.
        On a thread with no checkpoint yet, the update is its first (from the schema's
        starting values), so a thread can be seeded before its first run.
        With ``checkpoint_id`` the update is folded onto that (past) checkpoint and becomes
        the thread's head: a new branch, which the history then follows (the old branch
        stays readable by id); ``as_node`` works there too.

        Raises:
            ThreadBusyError: a run holds the thread.
            ConcurrentUpdateError: other writes kept moving the thread's head, more times
                in a row than the update retries.

        With ``subgraph`` (``"node:task_id"`` as :attr:`ThreadState.subgraphs` names it, or
        a path of them for a nested one) the update goes to that subgraph's state, in its
        namespace, through its reducers (``as_node`` a node of the subgraph); a paused parent
        resumed afterwards continues the subgraph from the updated state.
        """
        spec, fp, namespace = self.spec, self.fingerprint, self.namespace
        if subgraph is not None:
            from plait.graph.subgraph import subgraph_target

            spec, fp, namespace = subgraph_target(spec, fp, namespace, subgraph)
        return await update_thread(
            await self._ready_checkpointer(),
            spec,
            fp,
            thread_id,
            update,
            as_node,
            namespace=namespace,
            checkpoint_id=checkpoint_id,
        )

    def update_state(
        self,
        thread_id: str,
        update: Any,
        as_node: str | None = None,
        *,
        subgraph: str | Sequence[str] | None = None,
        checkpoint_id: str | None = None,
    ) -> str:
        return run_sync(self.aupdate_state(thread_id, update, as_node, subgraph=subgraph, checkpoint_id=checkpoint_id))

    async def abulk_update_state(
        self, thread_id: str, updates: Sequence[tuple[Any, str | None] | Mapping[str, Any]]
    ) -> str:
        """Apply several updates in order, each on the previous one's checkpoint; returns the
        last checkpoint id. Each item is an update mapping or an ``(update, as_node)`` pair."""
        if not updates:
            raise GraphError("bulk_update_state() needs at least one update")
        last = ""
        for item in updates:
            if isinstance(item, Mapping):
                last = await self.aupdate_state(thread_id, item)
            else:
                last = await self.aupdate_state(thread_id, item[0], item[1])
        return last

    def bulk_update_state(self, thread_id: str, updates: Sequence[tuple[Any, str | None] | Mapping[str, Any]]) -> str:
        return run_sync(self.abulk_update_state(thread_id, updates))

    async def afork(
        self, source_thread: str, target_thread: str, *, checkpoint_id: str | None = None, edits: Any = None
    ) -> str:
        """Copy a checkpoint (the latest by default) as the root of ``target_thread``, with
        ``edits`` folded through the reducers; the source is never modified. Returns the new
        checkpoint's id.

        Raises:
            ConcurrentUpdateError: ``target_thread`` already has checkpoints (a fork creates
                a thread; nothing is stored).
        """
        return await fork_thread(
            await self._ready_checkpointer(),
            self.spec,
            self.fingerprint,
            source_thread,
            target_thread,
            checkpoint_id=checkpoint_id,
            edits=edits,
            namespace=self.namespace,
        )

    def fork(
        self, source_thread: str, target_thread: str, *, checkpoint_id: str | None = None, edits: Any = None
    ) -> str:
        return run_sync(self.afork(source_thread, target_thread, checkpoint_id=checkpoint_id, edits=edits))

    async def afork_state(self, source_thread: str, checkpoint_id: str | None, target_thread: str) -> str:
        """Copy checkpoint ``checkpoint_id`` of ``source_thread`` as the root of ``target_thread``."""
        return await self.afork(source_thread, target_thread, checkpoint_id=checkpoint_id)

    def fork_state(self, source_thread: str, checkpoint_id: str | None, target_thread: str) -> str:
        return run_sync(self.afork_state(source_thread, checkpoint_id, target_thread))

    async def adiff_threads(self, a: str, b: str) -> ThreadDiff[ThreadState]:
        """The first step at which two threads' states differ, the keys that differ there,
        and the difference between their heads."""
        d = await diff_threads(await self._ready_checkpointer(), a, b, namespace=self.namespace)
        return d.shown(ThreadState.of)

    def diff_threads(self, a: str, b: str) -> ThreadDiff[ThreadState]:
        return run_sync(self.adiff_threads(a, b))


def _output(result: RunResult) -> dict[str, Any]:
    out = dict(result.values)
    if result.interrupts:
        out[INTERRUPT_KEY] = list(result.interrupts)
    return out
