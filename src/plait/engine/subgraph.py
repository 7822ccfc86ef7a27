"""Running a graph inside a node of another: subgraphs.

A subgraph's run is a run of its own graph (made by its parent's driver, through the
:class:`~plait.engine.context.TaskHost` protocol, so this module never imports the loop) on the
parent's thread id, with the parent's options, in a child namespace named after the parent task that runs it
(:func:`child_namespace`: ``parent_ns|node:task_id``), so its checkpoints are stored, and
resumed, like any thread's, with the same delta rule. Task ids are fixed when a step is
planned, so a parent task re-run after a crash, an interrupt or a failure finds its child's
checkpoints again and continues them: finished subgraph steps never run again.

The child takes no lease: it runs inside its parent's (:class:`BorrowedLease`), and its
commits carry the parent's lease token with :attr:`Fence.lease_namespace` naming the
parent's namespace, so a parent that lost its lease cannot write its subgraph's
checkpoints either, and no second lease can deadlock against the first.

An ``interrupt()`` inside the child pauses the child (stored in its namespace) and then the
parent task, whose interrupt carries the child's; the parent's ``Command(resume=v)`` re-runs
the parent task, which hands ``v`` to the child's waiting interrupt. Which parent interrupt
index answers which child interrupt is recorded as an effect of the parent task, so a
re-run never answers a new child interrupt with an old value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.fork import SUBGRAPH_EFFECT, fork_checkpoint
from plait.checkpoint.lease import rest_status
from plait.checkpoint.model import Checkpoint, ThreadInfo, waiting_interrupts
from plait.engine.context import GraphInterrupt, NodeContext
from plait.engine.options import RunResult
from plait.engine.spec import SubgraphRunner
from plait.types import Command, Interrupt

__all__ = [
    "BorrowedLease",
    "child_namespace",
    "delete_with_subgraphs",
    "fork_subgraphs",
    "run_subgraph",
    "stored_children",
    "subgraph_threads",
]

_EFFECT = SUBGRAPH_EFFECT
"""Effect names on the parent task: ``_EFFECT + str(i)`` holds the id of the child interrupt
that the parent's ``i``-th interrupt stands for."""


def child_namespace(parent: str, node: str, task_id: str) -> str:
    """The namespace of the subgraph run by ``task_id`` (of ``node``) in namespace ``parent``."""
    return f"{parent}|{node}:{task_id}" if parent else f"{node}:{task_id}"


class BorrowedLease:
    """The parent run's lease as its subgraph's run sees it: the same checks (a lost lease
    stops the child too), but never renewed, stopped or given back by the child."""

    def __init__(self, parent: Any) -> None:
        self._parent = parent
        """The parent's ThreadLease (or BorrowedLease, for a subgraph's subgraph)."""

    @property
    def error(self) -> BaseException | None:
        return self._parent.error  # type: ignore[no-any-return]

    def check(self) -> None:
        self._parent.check()

    async def confirm(self) -> None:
        await self._parent.confirm()

    def stop_renewing(self) -> None:
        """The parent's lease outlives the child's run: nothing to stop."""


async def run_subgraph(
    ctx: NodeContext, sub: SubgraphRunner, input: Mapping[str, Any], *, segment: str | None = None
) -> RunResult:
    """Run ``sub`` for the parent task of ``ctx`` with ``input``, or continue its stored run
    (after a crash, a failure, an interrupt); the child's final result.

    Raises:
        GraphInterrupt: the child paused; the parent task pauses with it.
    """
    host = ctx.host
    segment = segment or f"{ctx.node}:{ctx.task_id}"
    child = host.subgraph_run(sub, segment)
    scope = await host.subgraph_scope()
    if scope is None:
        return await child.execute(dict(input))
    head = await scope.checkpointer.aget(scope.thread_id, namespace=child.namespace)
    go: Any = dict(input)
    if head is not None:
        go = _continue_with(ctx, head)
        if go is _FINISHED:
            return _finished(head)
    result = await child.execute_inside(go, head, BorrowedLease(scope.lease), scope.fence)
    if result.status == "interrupted":
        await _pause_parent(ctx, result.interrupts)
    return result


_FINISHED: Any = object()


def _continue_with(ctx: NodeContext, head: Checkpoint) -> Any:
    """How to continue a child that has a stored run: its answer when it waits on an
    interrupt the parent has a resume value for, None to go on, _FINISHED when done."""
    waiting = waiting_interrupts(head.pending_writes)
    if waiting:
        for i, value in enumerate(ctx.resume_values):
            answered = ctx.effects.get(_EFFECT + str(i))
            if any(w.id == answered for w in waiting):
                return Command(resume={answered: value})
        return None  # asks again: the same interrupt pauses the parent again
    if not head.next_tasks:
        return _FINISHED
    return None


def _finished(head: Checkpoint) -> RunResult:
    """A child that finished before the parent's step was stored: its result, nothing re-run."""
    return RunResult(values=dict(head.values), interrupts=(), status="done", checkpoint_id=head.id, step=head.step)


async def _pause_parent(ctx: NodeContext, interrupts: tuple[Interrupt, ...]) -> None:
    """Pause the parent task on the child's first waiting interrupt (recorded as the parent
    task's next interrupt index, unless an earlier pause of it already was)."""
    first = interrupts[0]
    index = next(
        (i for i in range(len(ctx.effects) + 1) if ctx.effects.get(_EFFECT + str(i)) == first.id),
        None,
    )
    if index is None:
        index = sum(1 for k in ctx.effects if k.startswith(_EFFECT))
        await ctx.aonce(_EFFECT + str(index), lambda: first.id)
    raise GraphInterrupt(Interrupt(id=first.id, value=first.value, node=ctx.node, task_id=ctx.task_id, index=index))


async def stored_children(checkpointer: Checkpointer, cp: Checkpoint) -> list[Checkpoint]:
    """The heads of the subgraph runs that ``cp``'s next tasks started (added as nodes, or
    called explicitly: ``#0``, ``#1``, ...), as stored in their namespaces of the thread."""
    found: list[Checkpoint] = []
    for task in cp.next_tasks:
        base = child_namespace(cp.namespace, task.node, task.id)
        for n in range(-1, 1 << 16):
            child = await checkpointer.aget(cp.thread_id, namespace=base if n < 0 else f"{base}#{n}")
            if child is None and n >= 0:
                break
            if child is not None:
                found.append(child)
    return found


async def fork_subgraphs(checkpointer: Checkpointer, src: Checkpoint, target_thread: str) -> int:
    """Copy the stored runs of the subgraphs that ``src``'s next tasks run, nested ones too,
    to the same namespaces of ``target_thread`` (a fork keeps the task ids); how many were
    copied. Each copy is the subgraph's head, as a root of its namespace (its history stays
    with the source)."""
    copied = 0
    for child in await stored_children(checkpointer, src):
        await fork_checkpoint(checkpointer, child, target_thread)
        copied += 1 + await fork_subgraphs(checkpointer, child, target_thread)
    return copied


async def delete_with_subgraphs(checkpointer: Checkpointer, thread_id: str, namespace: str) -> int:
    """Delete a thread and the namespaces of the subgraphs its checkpoints' tasks ran, nested
    ones too (found through the tasks of its history: the head's lineage); how many
    subgraph namespaces were deleted."""
    deleted = 0
    for cp in await checkpointer.ahistory(thread_id, namespace=namespace):
        for child in await stored_children(checkpointer, cp):
            deleted += 1 + await delete_with_subgraphs(checkpointer, thread_id, child.namespace)
    await checkpointer.adelete_thread(thread_id, namespace=namespace)
    return deleted


async def subgraph_threads(checkpointer: Checkpointer, thread_id: str, namespace: str) -> list[ThreadInfo]:
    """The stored runs of the subgraphs the thread's checkpoints' tasks ran, nested ones too,
    as threads of the same id in their child namespaces, in the order the history meets them
    (newest first). Found through the thread's history, as :func:`delete_with_subgraphs`
    finds them: a subgraph's run takes no lease, so a store that lists the threads it leased
    (SQLite, PostgreSQL) has no row of its own for one; its status is then read from its
    head, as the store would have left it."""
    found: dict[str, ThreadInfo] = {}
    for cp in await checkpointer.ahistory(thread_id, namespace=namespace):
        for child in await stored_children(checkpointer, cp):
            if child.namespace in found:
                continue
            info = await checkpointer.aget_thread(thread_id, namespace=child.namespace)
            if info is None:
                info = ThreadInfo(
                    thread_id=thread_id,
                    namespace=child.namespace,
                    status=rest_status(child.next_tasks, child.pending_writes),
                    head_id=child.id,
                    step=child.step,
                    created_at=child.created_at,
                    updated_at=child.created_at,
                    source=str(child.metadata.get("source", "")),
                    checkpoints=len(await checkpointer.ahistory(thread_id, namespace=child.namespace)),
                )
            found[child.namespace] = info
            for nested in await subgraph_threads(checkpointer, thread_id, child.namespace):
                found.setdefault(nested.namespace, nested)
    return list(found.values())
