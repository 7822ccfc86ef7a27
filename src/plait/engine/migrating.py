"""Carrying a thread written by an older version of a graph over to the graph's version.

A graph compiled with ``version=N, migrations={n: fn}`` records ``graph_name`` and
``graph_version`` on every checkpoint it writes; a thread without them was written before
versions existed and is version 1. A run that finds its thread older than the graph applies
the chain of migrations once (:func:`carry_over`, pure: no I/O), checks the result the way a
resume always checks a changed graph (:func:`~plait.engine.pending.incompatibilities`), and
commits it as one checkpoint (source ``migrate``) under its lease, through the run's own
committer, before its first step; the older checkpoints stay for time travel.
:func:`migrate_thread` does the same ahead of time, without a run (``plait migrate``).

A migration is ``fn(values) -> values`` or, to rename the nodes the thread waits in,
``fn(values, next) -> (values, next)``. ``values`` is a plain copy of the thread's channel
values; ``next`` lists what the thread runs next, one entry per pending task in order: the
node's name, or a :class:`~plait.types.Send` (its node and argument) for a task a ``Send``
made. The i-th entry returned replaces the i-th task (which keeps its id, so its saved
results, interrupts and answers stay its own); a ``Send`` stays a ``Send`` and a name a name.
A step with no migration registered is the identity.

A registered migration has seen the values, so a channel whose reducer changed is its
business; with only identity steps between the thread and the graph, a changed reducer is
refused as before. Pending nodes the graph lacks and channels it dropped are refused always.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from plait._codec import freeze, freeze_send_arg
from plait._frozen import thaw
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import (
    Checkpoint,
    CheckpointWrite,
    Fence,
    PendingWrite,
    Task,
    WritesBatch,
    new_checkpoint_id,
)
from plait.engine.edit import UPDATE_OWNER
from plait.engine.merge import checkpoint_metadata, thread_version
from plait.engine.pending import incompatibilities
from plait.engine.spec import GraphSpec, Lineage
from plait.engine.starting import Starting
from plait.engine.subgraph import child_namespace
from plait.errors import (
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    GraphChangedError,
    GraphMigrationError,
    ThreadBusyError,
)
from plait.state.run_state import RunState
from plait.types import Send

__all__ = [
    "Migrated",
    "Migrating",
    "MigrationResult",
    "carry_over",
    "graph_threads",
    "migrate_thread",
    "recorded_reducers",
    "stored_carry_over",
]


def graph_version(spec: GraphSpec) -> int:
    """The graph's version (1 when it was compiled without one, for comparing only)."""
    return spec.lineage.version if spec.lineage is not None else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Migrated:
    """A thread's head carried over to the graph's version: what its checkpoint stores."""

    values: dict[str, Any]
    """The channel values, frozen."""
    versions: dict[str, int]
    """The channel versions: a channel the migrations changed (or made) gets a new one."""
    tasks: tuple[Task, ...]
    barriers: dict[str, tuple[str, ...]]
    pending: tuple[PendingWrite, ...]
    """The head's pending writes, an interrupt naming its node's new name."""
    changed: frozenset[str]
    from_version: int
    to_version: int


def _takes_next(fn: Callable[..., Any]) -> bool:
    """Whether a migration is ``fn(values, next)`` (two positional parameters or more)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in params) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _step(fn: Callable[..., Any], values: dict[str, Any], nxt: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """One migration, its result's shape checked (a TypeError says what is wrong)."""
    if _takes_next(fn):
        out = fn(values, list(nxt))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"a migration fn(values, next) must return (values, next), got {out!r}")
        new, new_next = out
        if not isinstance(new_next, list | tuple) or len(new_next) != len(nxt):
            raise TypeError(f"next must stay a list of {len(nxt)} entries (one per pending task), got {new_next!r}")
        for old, entry in zip(nxt, new_next, strict=True):
            if isinstance(old, Send) != isinstance(entry, Send) or not isinstance(entry, str | Send):
                raise TypeError(f"next entry {old!r} became {entry!r}: a node name stays a name, a Send a Send")
        nxt = list(new_next)
    else:
        new = fn(values)
    if not isinstance(new, Mapping) or not all(isinstance(k, str) for k in new):
        raise TypeError(f"a migration must return the values as a dict of channel names, got {new!r}")
    return dict(new), nxt


def _chain(lineage: Lineage, head: Checkpoint, start: int, thread_id: str) -> tuple[dict[str, Any], list[Task], bool]:
    """Apply ``lineage``'s migrations from version ``start`` to its version on ``head``'s
    values and next tasks; also says whether any migration was registered (not identity).

    Raises:
        GraphMigrationError: a migration raised, returned a wrong shape, or values that are
            not JSON data.
    """
    values = {k: thaw(v) for k, v in head.values.items()}
    nxt: list[Any] = [Send(t.node, thaw(t.arg)) if t.send else t.node for t in head.next_tasks]
    ran = False
    n = start
    try:
        for n in range(start, lineage.version):
            fn = lineage.migrations.get(n)
            if fn is not None:
                ran = True
                values, nxt = _step(fn, values, nxt)
        frozen = {k: freeze(v, k) for k, v in values.items()}
        tasks = [
            Task(id=t.id, node=e.node, send=True, arg=freeze_send_arg(e.arg, e.node, None))
            if isinstance(e, Send)
            else Task(id=t.id, node=e)
            for t, e in zip(head.next_tasks, nxt, strict=True)
        ]
    except Exception as error:
        raise GraphMigrationError(thread_id, start, lineage.version, n, error) from error
    return frozen, tasks, ran


def carry_over(spec: GraphSpec, graph_fp: str, head: Checkpoint, reducers: Mapping[str, str] | None) -> Migrated | None:
    """``head`` carried over to ``spec``'s version (None: it is at that version already, or
    newer, and ``spec`` can continue it as it is). ``reducers``: as recorded with the thread.

    Raises:
        GraphMigrationError: a migration failed (nothing is changed).
        GraphChangedError: the graph cannot continue the thread, migrated or not; the message
            names both versions and how to write the migration.
    """
    lineage = spec.lineage
    tv, gv = thread_version(head.metadata), graph_version(spec)
    thread_id = head.thread_id

    def refuse(changes: Sequence[str]) -> GraphChangedError:
        return _refusal(spec, head, changes)

    if lineage is None or tv >= gv:
        if head.metadata.get("graph") not in (None, graph_fp):
            changes = incompatibilities(spec, head, reducers)
            if changes:
                raise refuse(changes)
        return None
    values, tasks, ran = _chain(lineage, head, tv, thread_id)
    candidate = replace(head, values=values, next_tasks=tuple(tasks))
    changes = incompatibilities(spec, candidate, None if ran else reducers)
    changes += _stale_results(spec, head.pending_writes)
    if changes:
        raise refuse(changes)
    renamed = {t.node: n.node for t, n in zip(head.next_tasks, tasks, strict=True) if t.node != n.node}
    changed = frozenset(k for k, v in values.items() if k not in head.values or head.values[k] != v)
    top = max(head.versions.values(), default=0)
    versions = {k: top + 1 if k in changed else head.versions.get(k, top) for k in values}
    return Migrated(
        values=values,
        versions=versions,
        tasks=tuple(tasks),
        barriers={j: tuple(renamed.get(s, s) for s in srcs) for j, srcs in head.barriers.items()},
        pending=tuple(_renamed_write(w, renamed) for w in head.pending_writes),
        changed=changed,
        from_version=tv,
        to_version=gv,
    )


def _stale_results(spec: GraphSpec, pending: Sequence[PendingWrite]) -> list[str]:
    """The channels the saved results of a step's finished tasks write that the graph no
    longer has: a migration sees the values, not those writes, so the step must end first."""
    gone = {
        k
        for w in pending
        if w.kind == "result" and isinstance(w.value, Mapping)
        for k, _ in w.value.get("w", ())
        if k not in spec.schema
    }
    return [
        f"a finished task of the thread's unfinished step saved a write to channel {k!r}, which the graph no longer "
        "has (finish that step with the graph that wrote it, then migrate)"
        for k in sorted(gone)
    ]


def _refusal(spec: GraphSpec, head: Checkpoint, changes: Sequence[str]) -> GraphChangedError:
    lineage = spec.lineage
    return GraphChangedError(
        head.thread_id,
        changes,
        thread_version=thread_version(head.metadata),
        graph_version=graph_version(spec),
        graph=lineage.name if lineage is not None else None,
    )


async def stored_carry_over(
    checkpointer: Checkpointer | None, spec: GraphSpec, graph_fp: str, head: Checkpoint, namespace: str
) -> Migrated | None:
    """:func:`carry_over` for a stored thread: with the reducers recorded with it (read only
    when the graph changed or the thread is older), and refusing to rename a node the thread
    is paused in a subgraph of: the subgraph's stored steps live under the node's name, and
    the renamed task would start it afresh, leaving them behind.

    Raises:
        GraphMigrationError / GraphChangedError: as :func:`carry_over`.
    """
    lineage = spec.lineage
    older = lineage is not None and thread_version(head.metadata) < lineage.version
    needs = older or head.metadata.get("graph") not in (None, graph_fp)
    reducers = await recorded_reducers(checkpointer, head, namespace) if needs else None
    m = carry_over(spec, graph_fp, head, reducers)
    if m is None or checkpointer is None:
        return m
    lost = []
    for old, new in zip(head.next_tasks, m.tasks, strict=True):
        if old.node != new.node:
            child = await checkpointer.aget(head.thread_id, namespace=child_namespace(namespace, old.node, old.id))
            if child is not None:
                lost.append(
                    f"pending node {old.node!r} is inside its subgraph, whose stored steps renaming it to "
                    f"{new.node!r} would leave behind"
                )
    if lost:
        raise _refusal(spec, head, lost)
    return m


def _renamed_write(w: PendingWrite, renamed: Mapping[str, str]) -> PendingWrite:
    """An interrupt of a renamed node names the new node (its answer goes by task id)."""
    v = w.value
    if w.kind == "interrupt" and isinstance(v, Mapping) and v.get("node") in renamed:
        return replace(w, value={**v, "node": renamed[v["node"]]})
    return w


async def recorded_reducers(
    checkpointer: Checkpointer | None, head: Checkpoint, namespace: str
) -> Mapping[str, str] | None:
    """The reducers recorded with the thread: the head's, or the newest checkpoint's that
    has them (an older checkpoint may be the only one that recorded them)."""
    reducers = head.metadata.get("reducers")
    if reducers is None and checkpointer is not None and head.thread_id:
        for cp in await checkpointer.ahistory(head.thread_id, namespace=namespace):
            if "reducers" in cp.metadata:
                return cp.metadata["reducers"]  # type: ignore[no-any-return]
    return reducers


class Migrating(Starting):
    """The driver's half that carries its thread over before the first step (the fields are
    the driver's; :class:`~plait.engine.loop.Driver` derives from this)."""

    async def _carried_over(self, head: Checkpoint) -> Checkpoint:
        """``head`` checked, or migrated and committed (one checkpoint, source ``migrate``,
        under the run's lease) when the thread is older than the graph; the run goes on from
        what this returns. A subgraph's run only checks: its thread is its parent's."""
        if self.path:
            await self._check_compatible(head)
            return head
        m = await stored_carry_over(self.checkpointer, self.spec, self.graph_fp, head, self.namespace)
        if m is None:
            return head
        st = self.state = RunState.restored(
            self.spec.schema, m.values, m.versions, version=max(m.versions.values(), default=0), super_step=head.step
        )
        st.writers = self.spec.writers
        if self.persist is not None:
            self.persist.started_from(head)
        extra = {"migrated_from": m.from_version, "migrated_to": m.to_version}
        cp = self._checkpoint(
            new_checkpoint_id(after=head.id), head.id, head.step, m.tasks, m.barriers, "migrate", None, **extra
        )
        self._store(cp, set(m.changed))
        self._carry(cp, m.pending)
        await self._sync_point()
        return replace(cp, pending_writes=m.pending)


MigrationStatus = Literal["migrated", "would_migrate", "current", "busy", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MigrationResult:
    """What migrating one stored thread ahead of time did (:meth:`CompiledGraph.amigrate`)."""

    thread_id: str
    status: MigrationStatus
    """``migrated``; ``would_migrate`` (a dry run); ``current`` (at the graph's version or
    newer: nothing to do); ``busy`` (a run holds it, or wrote it meanwhile: skipped, try
    again later); ``failed`` (:attr:`error` says why; the thread is unchanged)."""
    from_version: int
    """The version the thread was written by."""
    to_version: int
    """The graph's version."""
    checkpoint_id: str | None = None
    """The migrated checkpoint's id (``migrated`` only)."""
    error: GraphMigrationError | GraphChangedError | None = None
    """Why a ``failed`` thread could not be migrated: a migration raised, or the graph cannot
    continue the migrated thread."""


async def migrate_thread(
    checkpointer: Checkpointer,
    spec: GraphSpec,
    graph_fp: str,
    thread_id: str,
    *,
    namespace: str = "",
    dry_run: bool = False,
) -> MigrationResult:
    """Carry a stored thread over to the graph's version ahead of time, without running it
    (what the next run would do first). The commit is fenced like an ``update_state``: it is
    refused while a run holds the thread, or when the head moved since it was read, and the
    thread is then reported ``busy`` and left alone.

    Raises:
        CheckpointNotFoundError: no such thread.
    """
    head = await checkpointer.aget(thread_id, namespace=namespace)
    if head is None:
        raise CheckpointNotFoundError(thread_id, None, namespace)
    tv, gv = thread_version(head.metadata), graph_version(spec)

    def result(status: MigrationStatus, **more: Any) -> MigrationResult:
        return MigrationResult(thread_id=thread_id, status=status, from_version=tv, to_version=gv, **more)

    if tv >= gv:
        return result("current")
    try:
        m = await stored_carry_over(checkpointer, spec, graph_fp, head, namespace)
    except (GraphMigrationError, GraphChangedError) as error:
        return result("failed", error=error)
    assert m is not None
    if dry_run:
        info = await checkpointer.aget_thread(thread_id, namespace=namespace)
        return result("busy" if info is not None and info.status == "busy" else "would_migrate")
    cid = new_checkpoint_id(after=head.id)
    meta = checkpoint_metadata(
        "migrate", head.step, spec, graph_fp, carry=head.metadata, migrated_from=tv, migrated_to=gv
    )
    cp = Checkpoint(
        thread_id=thread_id,
        namespace=namespace,
        id=cid,
        parent_id=head.id,
        step=head.step,
        values=m.values,
        versions=m.versions,
        next_tasks=m.tasks,
        barriers=m.barriers,
        metadata=meta,
        created_at=time.time(),
    )
    batch = WritesBatch(thread_id=thread_id, namespace=namespace, checkpoint_id=cid, writes=m.pending)
    try:
        await checkpointer.acommit(
            checkpoints=[CheckpointWrite(checkpoint=cp, changed=m.changed)],
            writes=[batch] if m.pending else [],
            fence=Fence(owner=UPDATE_OWNER, expect_head=head.id),
        )
    except (ThreadBusyError, ConcurrentUpdateError):
        return result("busy")
    return result("migrated", checkpoint_id=cid)


async def graph_threads(checkpointer: Checkpointer, spec: GraphSpec, namespace: str) -> list[str]:
    """The stored threads of ``spec``'s graph in ``namespace`` (finished ones too), oldest
    activity last: those whose head records the graph's name, and those that record none
    (written before versions existed; a namespace holds one graph's threads)."""
    name = spec.lineage.name if spec.lineage is not None else None
    found: list[str] = []
    for info in await checkpointer.alist_threads(namespace=namespace):
        head = await checkpointer.aget(info.thread_id, namespace=namespace)
        if head is not None and head.metadata.get("graph_name") in (None, name):
            found.append(info.thread_id)
    return found
