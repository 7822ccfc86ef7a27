"""CompiledGraph: run a graph, and inspect, edit, fork and replay its threads.

Every method is implemented once, async (``ainvoke``, ``aget_state``, ...); the sync method
of the same name without the ``a`` is a one-line wrapper over it. The class is built in three
floors, one job each: :mod:`plait.graph.bound` (options and ``bind``),
:mod:`plait.graph.running` (``invoke``/``stream``) and this module (drawing, inspecting and
editing threads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plait._aliases import with_config
from plait._gc_pause import gc_paused
from plait._sync import run_sync
from plait.checkpoint.address import coerce_checkpointer
from plait.checkpoint.model import Status, ThreadInfo
from plait.engine.caching import node_namespace
from plait.engine.edit import fork_thread, update_thread
from plait.engine.emitter import INTERRUPT_KEY
from plait.engine.migrating import MigrationResult, graph_threads, migrate_thread
from plait.engine.subgraph import delete_with_subgraphs, subgraph_threads
from plait.errors import CheckpointNotFoundError, GraphError, MissingNodeError, NoCacheError
from plait.graph.closing import REQUIRED as _REQUIRED
from plait.graph.records import ThreadState
from plait.graph.running import Running, StreamMode
from plait.graph.subgraph import cached_namespaces, nested_states, subgraph_target
from plait.inspect import ThreadDiff, diff_threads
from plait.tracing import hooks as tracing

if TYPE_CHECKING:
    from plait.graph.drawable import GraphDrawing

__all__ = ["INTERRUPT_KEY", "CompiledGraph", "MigrationResult", "StreamMode", "coerce_checkpointer"]


class CompiledGraph(Running):
    """A validated graph, bound to a checkpointer. Thread-safe to share; each call is a run."""

    # -- drawing -------------------------------------------------------------------------

    def get_graph(self, *, xray: bool = False) -> GraphDrawing:
        """The graph's structure as one object, as LangGraph's ``get_graph()``: ``nodes``,
        ``edges``, ``to_json()``, ``draw_mermaid()`` (subgraphs expanded with ``xray``),
        ``draw_ascii()``, ``draw_svg()`` and ``draw_png()``, all drawn here, offline."""
        from plait.graph.drawable import GraphDrawing

        return GraphDrawing(self.spec, xray)

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

    # -- the node cache ------------------------------------------------------------------

    async def aclear_cache(self, nodes: Sequence[str] | None = None) -> int:
        """Remove the cached results of ``nodes`` (None: of every node with a
        ``cache_policy``, its subgraphs' nodes included, as they use this graph's cache);
        how many entries were removed. The next run of such a node runs it.

        Raises:
            NoCacheError: the graph was compiled without a cache.
            MissingNodeError: a name that is not one of the graph's nodes.
        """
        cache = self.binding.cache
        if cache is None:
            raise NoCacheError(self.name)
        if nodes is None:
            return await cache.aclear(sorted(cached_namespaces(self.spec)))
        known = tuple(self.spec.nodes)
        for n in nodes:
            if n not in self.spec.nodes:
                raise MissingNodeError(n, known)
        return await cache.aclear([node_namespace(self.spec.nodes[n]) for n in nodes])

    def clear_cache(self, nodes: Sequence[str] | None = None) -> int:
        """Sync :meth:`aclear_cache`."""
        return run_sync(self.aclear_cache(nodes))

    # -- inspecting ----------------------------------------------------------------------

    async def aget_state(
        self,
        thread_id: str | Mapping[str, Any],
        checkpoint_id: str | None = None,
        *,
        default: Any = _REQUIRED,
        subgraphs: bool = False,
    ) -> ThreadState:
        """The thread's latest state (or the state at ``checkpoint_id``), with how the
        thread stands (:attr:`ThreadState.status`) and the errors stored with it.

        Args:
            default: returned instead of raising when there is no such thread or
                checkpoint (``get_state(t, default=None)``: the restart idiom).
            subgraphs: fill in :attr:`ThreadState.subgraphs`, the state of the subgraphs
                the next step's tasks run (paused or unfinished inside).

        ``thread_id`` may be LangGraph's config, ``{"configurable": {"thread_id": t,
        "checkpoint_id": c}}``.

        Raises:
            CheckpointNotFoundError: no such thread or checkpoint, and no ``default``.
        """
        thread_id, checkpoint_id = _address(thread_id, checkpoint_id, "get_state")
        checkpointer = await self._ready_checkpointer()
        cp, status = await checkpointer.aget_with_status(thread_id, checkpoint_id, namespace=self.namespace)
        if cp is None:
            if default is not _REQUIRED:
                return default  # type: ignore[no-any-return]
            raise CheckpointNotFoundError(thread_id, checkpoint_id, self.namespace)
        state = ThreadState.of(cp, status)
        if subgraphs:
            state = dataclasses.replace(state, subgraphs=await nested_states(checkpointer, cp, self.spec))
        return state

    def get_state(
        self,
        thread_id: str | Mapping[str, Any],
        checkpoint_id: str | None = None,
        *,
        default: Any = _REQUIRED,
        subgraphs: bool = False,
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
        thread_id: str | Mapping[str, Any],
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ThreadState]:
        """The thread's checkpoints, newest first, following the newest branch
        (``thread_id`` may be LangGraph's config, naming only the thread)."""
        thread_id, _ = _address(thread_id, None, "get_state_history", at=False)
        checkpointer = await self._ready_checkpointer()
        found = await checkpointer.ahistory(
            thread_id, namespace=self.namespace, limit=limit, before=before, filter=filter
        )
        with gc_paused():  # a snapshot per checkpoint, all kept (see plait._gc_pause)
            return [ThreadState.of(cp) for cp in found]

    def get_state_history(
        self,
        thread_id: str | Mapping[str, Any],
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ThreadState]:
        return run_sync(self.aget_state_history(thread_id, limit=limit, before=before, filter=filter))

    async def alist_threads(
        self,
        *,
        status: Status | None = None,
        limit: int | None = None,
        before: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        subgraphs: bool = False,
    ) -> list[ThreadInfo]:
        """This graph's threads (of its namespace), most recently active first, filtered by
        ``status`` and by the head's ``metadata`` and paged in the store (see
        :meth:`Checkpointer.alist_threads`). With ``subgraphs``, each thread is followed by
        the stored runs of its subgraphs: each a thread of the same id in a child namespace
        (``node:task_id``, nested ``a:t1|b:t2``), which ``get_state(t, subgraphs=True)`` and
        ``update_state(..., subgraph=...)`` name the same way (``limit``, ``before`` and
        ``metadata`` then page and filter the graph's own threads, and ``status`` filters
        them all)."""
        checkpointer = await self._ready_checkpointer()
        if not subgraphs:
            return await checkpointer.alist_threads(
                namespace=self.namespace, status=status, limit=limit, before=before, metadata=metadata
            )
        out: list[ThreadInfo] = []
        for info in await checkpointer.alist_threads(
            namespace=self.namespace, limit=limit, before=before, metadata=metadata
        ):
            for t in [info, *await subgraph_threads(checkpointer, info.thread_id, self.namespace)]:
                if status is None or t.status == status:
                    out.append(t)
        return out

    def list_threads(
        self,
        *,
        status: Status | None = None,
        limit: int | None = None,
        before: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        subgraphs: bool = False,
    ) -> list[ThreadInfo]:
        """Sync :meth:`alist_threads`."""
        return run_sync(
            self.alist_threads(status=status, limit=limit, before=before, metadata=metadata, subgraphs=subgraphs)
        )

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
        thread_id: str | Mapping[str, Any],
        update: Any,
        as_node: str | None = None,
        *,
        subgraph: str | Sequence[str] | None = None,
        checkpoint_id: str | None = None,
    ) -> str:
        """Fold ``update`` (a mapping or (key, value) pairs; None, like ``{}``, writes
        nothing) through the reducers as a new checkpoint (source ``update``) and return its id.

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
        thread_id, checkpoint_id = _address(thread_id, checkpoint_id, "update_state")
        spec, fp, namespace = self.spec, self.fingerprint, self.namespace
        if subgraph is not None:
            spec, fp, namespace = subgraph_target(spec, fp, namespace, subgraph)
        where = {"plait.thread_id": thread_id, "plait.namespace": namespace, "plait.as_node": as_node or ""}
        with tracing.operation(self.binding.tracing, "plait.update", where) as traced:
            made = await update_thread(
                await self._ready_checkpointer(),
                spec,
                fp,
                thread_id,
                update,
                as_node,
                namespace=namespace,
                checkpoint_id=checkpoint_id,
            )
            if traced is not None:
                traced(made)
        return made

    def update_state(
        self,
        thread_id: str | Mapping[str, Any],
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
        where = {"plait.thread_id": target_thread, "plait.namespace": self.namespace, "plait.source": source_thread}
        with tracing.operation(self.binding.tracing, "plait.fork", where) as traced:
            made = await fork_thread(
                await self._ready_checkpointer(),
                self.spec,
                self.fingerprint,
                source_thread,
                target_thread,
                checkpoint_id=checkpoint_id,
                edits=edits,
                namespace=self.namespace,
            )
            if traced is not None:
                traced(made)
        return made

    def fork(
        self, source_thread: str, target_thread: str, *, checkpoint_id: str | None = None, edits: Any = None
    ) -> str:
        return run_sync(self.afork(source_thread, target_thread, checkpoint_id=checkpoint_id, edits=edits))

    async def afork_state(self, source_thread: str, checkpoint_id: str | None, target_thread: str) -> str:
        """Copy checkpoint ``checkpoint_id`` of ``source_thread`` as the root of ``target_thread``."""
        return await self.afork(source_thread, target_thread, checkpoint_id=checkpoint_id)

    def fork_state(self, source_thread: str, checkpoint_id: str | None, target_thread: str) -> str:
        return run_sync(self.afork_state(source_thread, checkpoint_id, target_thread))

    async def amigrate(
        self,
        thread_id: str | None = None,
        *,
        dry_run: bool = False,
        on_result: Callable[[MigrationResult], None] | None = None,
    ) -> list[MigrationResult]:
        """Migrate stored threads to this graph's version ahead of time, without running
        them: ``thread_id``, or every thread of this graph in its namespace (by the name its
        threads record, finished ones too; a thread that records none was written before
        versions and is taken as this graph's). Each older thread gets the checkpoint its
        next run would otherwise write first (source ``migrate``). A thread a run holds is
        skipped (``busy``); a migration that raises leaves its thread unchanged
        (``failed``, with the error) and the others go on. ``dry_run`` writes nothing.
        ``on_result`` hears of each thread as it is done (a progress display).

        Raises:
            CheckpointNotFoundError: ``thread_id`` names no thread.
        """
        checkpointer = await self._ready_checkpointer()
        ns = self.namespace
        threads = [thread_id] if thread_id is not None else await graph_threads(checkpointer, self.spec, ns)
        results: list[MigrationResult] = []
        for t in threads:
            r = await migrate_thread(checkpointer, self.spec, self.fingerprint, t, namespace=ns, dry_run=dry_run)
            results.append(r)
            if on_result is not None:
                on_result(r)
        return results

    def migrate(
        self,
        thread_id: str | None = None,
        *,
        dry_run: bool = False,
        on_result: Callable[[MigrationResult], None] | None = None,
    ) -> list[MigrationResult]:
        """Sync :meth:`amigrate`."""
        return run_sync(self.amigrate(thread_id, dry_run=dry_run, on_result=on_result))

    async def adiff_threads(self, a: str, b: str) -> ThreadDiff[ThreadState]:
        """The first step at which two threads' states differ, the keys that differ there,
        and the difference between their heads."""
        d = await diff_threads(await self._ready_checkpointer(), a, b, namespace=self.namespace)
        return d.shown(ThreadState.of)

    def diff_threads(self, a: str, b: str) -> ThreadDiff[ThreadState]:
        return run_sync(self.adiff_threads(a, b))


def _address(
    thread: str | Mapping[str, Any], checkpoint_id: str | None, call: str, *, at: bool = True
) -> tuple[str, str | None]:
    """The thread id and checkpoint id a call names: given as they are, or in LangGraph's
    config (``{"configurable": {"thread_id": t, "checkpoint_id": c}}``).

    Raises:
        TypeError: a config that names no thread, a key plait has no place for, or (``at``
            false: a call that reads a whole thread) a checkpoint id.
    """
    if not isinstance(thread, Mapping):
        return thread, checkpoint_id
    given = with_config({"thread_id": None, "checkpoint_id": checkpoint_id}, thread, call, run=False)
    if given["thread_id"] is None:
        raise TypeError(
            f"{call}: the config names no thread: write {call}(thread_id, ...) or config['configurable']['thread_id']"
        )
    if not at and given["checkpoint_id"] is not None:
        raise TypeError(f"{call}: a history is a whole thread's: drop checkpoint_id, and pass before=... to page it")
    return given["thread_id"], given["checkpoint_id"]
