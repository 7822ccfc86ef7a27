"""Writing a thread by hand: an update folded through the reducers (as a node or not), and a
fork of a checkpoint, with edits, into a new thread.

Engine work, not the facade's: both rebuild state from a checkpoint, fold through the graph's
reducers, plan the next tasks and commit under a fence, exactly as a run's step does.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import replace
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.fork import fork_checkpoint
from plait.checkpoint.lease import rest_status
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Fence, Task, WritesBatch, new_checkpoint_id
from plait.engine.merge import checkpoint_metadata, thread_version
from plait.engine.plan import plan_next
from plait.engine.spec import GraphSpec
from plait.engine.subgraph import fork_subgraphs
from plait.engine.tasks import compute_routes
from plait.errors import CheckpointNotFoundError, ConcurrentUpdateError, GraphError, MissingNodeError, ThreadBusyError
from plait.state.run_state import RunState
from plait.types import END

__all__ = ["fork_thread", "update_thread"]

UPDATE_OWNER = f"update:{uuid.uuid4().hex}"
"""The fence owner of ``update_state``: a name no lease is ever taken under, so any run's
unexpired lease refuses the update. One per process (none is needed per call: updates never
hold a lease, so they cannot be told apart by it, nor need to be)."""

UPDATE_RETRIES = 5
"""How many times an update folds itself again onto a head that moved under it (another
update landed first) before raising ConcurrentUpdateError."""


def _restored(spec: GraphSpec, cp: Checkpoint, *, defaults: bool = True) -> RunState:
    return RunState.restored(
        spec.schema, cp.values, cp.versions, version=cp.version, super_step=cp.step, defaults=defaults
    )


def check_update_node(spec: GraphSpec, as_node: str) -> None:
    """Refuse an ``as_node`` the thread could not continue from.

    Raises:
        MissingNodeError: the graph has no such node.
        GraphError: the node routes only by ``Command``, so its successors are unknown.
    """
    if as_node == END:  # ending the thread by hand: nothing runs next
        return
    if as_node not in spec.nodes:
        raise MissingNodeError(as_node, tuple(spec.nodes))
    if not (spec.edges.get(as_node) or spec.routers.get(as_node) or spec.joins_by_source.get(as_node)):
        raise GraphError(
            f"cannot update state as node {as_node!r}: it routes only by Command, so its successors are "
            "unknown and the thread could not continue; update without as_node, or as a node with edges"
        )


async def update_thread(
    checkpointer: Checkpointer,
    spec: GraphSpec,
    graph_fp: str,
    thread_id: str,
    update: Any,
    as_node: str | None,
    *,
    namespace: str = "",
    checkpoint_id: str | None = None,
) -> str:
    """Fold ``update`` onto the thread's head as a new checkpoint (source ``update``) and
    return its id; see :meth:`plait.CompiledGraph.aupdate_state`. With ``checkpoint_id``
    the update is folded onto that checkpoint instead, and becomes the thread's new head: a
    new branch of the same thread (the old one stays readable by id).

    No lease of its own: the commit's fence refuses it if a run holds the thread
    (ThreadBusyError) or if another write moved the head since it was read; the update is
    then folded again onto the new head, so concurrent updates all land. The first attempt
    builds on the head this process last committed, when the checkpointer remembers it (a
    read saved), fenced to still be the head and to have no pending writes meanwhile; an
    update of a past checkpoint uses it the same way, for the fence, and builds on the past
    checkpoint as the checkpointer remembers it from an earlier update of it, when it does
    (another read saved), fenced to still be stored and to have no pending writes.
    """
    if as_node is not None:
        check_update_node(spec, as_node)
    known = checkpointer.known_head(thread_id, namespace=namespace)
    for attempt in range(UPDATE_RETRIES + 1):
        head = known if attempt == 0 else None
        if head is None:
            head = await checkpointer.aget(thread_id, namespace=namespace)
        start, remembered = head, None
        if checkpoint_id is not None and (head is None or head.id != checkpoint_id):
            # a past checkpoint: the update is a new branch, fenced on the head
            if attempt == 0:
                remembered = checkpointer.known_checkpoint(thread_id, checkpoint_id, namespace=namespace)
            start = remembered or await checkpointer.aget_for_write(thread_id, checkpoint_id, namespace=namespace)
            if head is None or start is None:
                raise CheckpointNotFoundError(thread_id, checkpoint_id, namespace)
        if head is None or start is None:  # a new thread: the update is its first checkpoint
            fence = Fence(owner=UPDATE_OWNER, expect_head=None)
            head = start = _empty_head(spec, thread_id, namespace)
        else:
            fence = Fence(
                owner=UPDATE_OWNER,
                expect_head=head.id,
                expect_no_writes=head is known,
                expect_parent_no_writes=remembered is not None,
            )
        try:
            return await _write_update(checkpointer, spec, graph_fp, start, update, as_node, fence, after=head.id)
        except ConcurrentUpdateError:
            if attempt == UPDATE_RETRIES:
                raise
        except ThreadBusyError as busy:
            if busy.alive is not False or checkpoint_id is not None:
                raise
            return await _update_over_the_dead(checkpointer, spec, graph_fp, thread_id, update, as_node, namespace)
    raise AssertionError("unreachable")


_NO_HEAD = ""
"""The id of the stand-in head of a thread with no checkpoint yet (never stored)."""


def _empty_head(spec: GraphSpec, thread_id: str, namespace: str) -> Checkpoint:
    """What an update of a thread with no checkpoint builds on: the schema's starting
    values, one step before the first (so the update's checkpoint is step 0, a root)."""
    return Checkpoint(
        thread_id=thread_id,
        namespace=namespace,
        id=_NO_HEAD,
        parent_id=None,
        step=-1,
        values=spec.schema.initial_values(),
        next_tasks=(),
        barriers={},
    )


async def _update_over_the_dead(
    checkpointer: Checkpointer,
    spec: GraphSpec,
    graph_fp: str,
    thread_id: str,
    update: Any,
    as_node: str | None,
    namespace: str,
) -> str:
    """The run holding the thread died on this machine (its lease is unexpired, but its
    process is provably gone): take its lease over, which fences anything it could still
    write, and write the update under that lease, giving it back in the commit."""
    lease, head = await checkpointer.atake_lease_and_get(thread_id, UPDATE_OWNER, namespace=namespace)
    try:
        if head is None:
            raise CheckpointNotFoundError(thread_id, None, namespace)
        fence = Fence(owner=UPDATE_OWNER, token=lease.token, expect_head=head.id, release=True)
        return await _write_update(checkpointer, spec, graph_fp, head, update, as_node, fence)
    except BaseException:
        with contextlib.suppress(Exception):
            await checkpointer.arelease_lease(lease)
        raise


async def _write_update(
    checkpointer: Checkpointer,
    spec: GraphSpec,
    graph_fp: str,
    head: Checkpoint,
    update: Any,
    as_node: str | None,
    fence: Fence,
    *,
    after: str | None = None,
) -> str:
    """``after``: the thread's head when ``head`` is a past checkpoint (the new id must sort
    after every stored one to become the head)."""
    state = _restored(spec, head)
    who = as_node or "update"
    cid = new_checkpoint_id(after=after or head.id or None)  # names the update's messages
    # None writes nothing (LangGraph's ``update_state(t, None, as_node=END)``), as {} does
    writes = spec.schema.prepare(update, who, cid, state.values) if update is not None else []
    base = dict(state.values)
    changed = state.fold(base, writes, who)
    if changed:
        state.apply(changed, who)
    tasks: tuple[Task, ...]
    barriers: dict[str, tuple[str, ...]]
    if as_node == END:  # the thread ends here: its next tasks and what they had pending are dropped
        tasks, barriers = (), {}
    elif as_node is not None:
        routes = await compute_routes(spec, as_node, state, base, writes, None)
        tasks, barriers = plan_next(spec, cid, [(Task(id="", node=as_node), routes)], head.barriers)
    else:
        tasks, barriers = head.next_tasks, dict(head.barriers)
    cp = Checkpoint(
        thread_id=head.thread_id,
        namespace=head.namespace,
        id=cid,
        parent_id=head.id or None,
        step=head.step + 1,
        values=dict(state.table),
        versions=dict(state.channel_versions),
        next_tasks=tuple(tasks),
        barriers=barriers,
        metadata=checkpoint_metadata(
            "update",
            head.step + 1,
            spec,
            graph_fp,
            writes={who: sorted(changed)},
            carry=head.metadata,
            **_kept_version(spec, head),
        ),
        created_at=time.time(),
    )
    carried = head.pending_writes if as_node is None else ()
    # Built on a stored checkpoint (its ids were checked when it was stored), every other
    # field made here: nothing for the commit to check again (see CheckpointWrite.checked).
    checkpoints = [CheckpointWrite(checkpoint=cp, changed=frozenset(changed), checked=head.id != _NO_HEAD)]
    batches = (
        [WritesBatch(thread_id=cp.thread_id, namespace=cp.namespace, checkpoint_id=cid, writes=carried)]
        if carried
        else []
    )
    if fence.release:  # written under a lease: its release says how the update leaves the thread
        fence = replace(fence, status=rest_status(cp.next_tasks, carried))
    await checkpointer.acommit(checkpoints=checkpoints, writes=batches, fence=fence)
    return cid


def _kept_version(spec: GraphSpec, head: Checkpoint) -> dict[str, Any]:
    """An update of a thread older than the graph keeps the thread's version: it migrates
    nothing, so the next run still must (see :mod:`plait.engine.migrating`)."""
    if spec.lineage is None or head.id == _NO_HEAD:
        return {}
    older = thread_version(head.metadata)
    return {"graph_version": older} if older < spec.lineage.version else {}


async def fork_thread(
    checkpointer: Checkpointer,
    spec: GraphSpec,
    graph_fp: str,
    source_thread: str,
    target_thread: str,
    *,
    checkpoint_id: str | None = None,
    edits: Any = None,
    namespace: str = "",
) -> str:
    """Copy a checkpoint (the latest by default) as the root of ``target_thread`` with
    ``edits`` folded through the reducers; see :meth:`plait.CompiledGraph.afork`."""
    if checkpoint_id is None:
        src = await checkpointer.aget(source_thread, namespace=namespace)
        head_id = None if src is None else src.id
    else:  # the source, and whether it is the head (a step under way), in one read
        src, head_id = await checkpointer.aget_with_head(source_thread, checkpoint_id, namespace=namespace)
    if src is None:
        raise CheckpointNotFoundError(source_thread, checkpoint_id, namespace)
    state = _restored(spec, src, defaults=False)
    edited: list[str] = []
    cid = new_checkpoint_id()  # names the edits' messages
    if edits:
        changed = state.fold(state.values, spec.schema.prepare(edits, "fork", cid, state.values), "fork")
        if changed:
            state.apply(changed, "fork")
        edited = sorted(changed)
    forked = await fork_checkpoint(
        checkpointer,
        src,
        target_thread,
        values=state.table,
        versions=state.channel_versions,
        metadata={"graph": graph_fp, "reducers": spec.reducer_specs},
        edited=edited,
        checkpoint_id=cid,
    )
    if head_id == src.id:  # a step under way: its subgraphs' runs come along
        await fork_subgraphs(checkpointer, src, target_thread)
    return forked
