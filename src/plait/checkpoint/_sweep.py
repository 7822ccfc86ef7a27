"""The retention sweep, written once for every backend over the protocol's own calls.

A backend supplies the primitives (list threads, read a head, take and give back a lease,
delete a thread, prune it to its head's lineage with ``branches=False``); this module decides
what goes. The rules (see :mod:`plait.checkpoint.retention`):

* threads are swept with the namespaces of their subgraphs, as one group, owned by the
  top-level thread; a group any member of which is ``busy`` is skipped and reported;
* a thread's own ``"retention"`` metadata (on its head) wins over the store's policy;
* idle time is the store's clock now minus the newest of the group's last write times;
* an ``interrupted`` thread is kept whole under ``keep_interrupted``, else reduced (never
  deleted: what still resumes it stays);
* before changing a group, the sweep takes the top-level thread's lease (as a run would), so
  a run that started after the listing makes the sweep skip the thread instead of having its
  thread deleted under it; subgraphs run under their parent's lease, so that covers them.

The sweep decides first and changes after, in batches (:class:`GroupPlan`,
``Checkpointer._aapply_sweep``): a SQL store applies a batch of groups in one transaction,
checking each group's lease inside it, because a transaction per thread (three with the
lease's take and give back) made a sweep cost a disk sync per thread: 71 threads/s on SQLite
and 12 on PostgreSQL, where the issue asks 2,000 (docs/benchmarks.md, "Sweeping").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from plait.checkpoint.model import Checkpoint, Lease, RestStatus, ThreadInfo
from plait.checkpoint.retention import (
    NEVER,
    Retention,
    SweepReport,
    ThreadKey,
    group_threads,
    parent_namespaces,
    thread_policy,
)
from plait.errors import RetentionError, ThreadBusyError

__all__ = ["BATCH", "SWEEP_OWNER", "Applied", "GroupPlan", "Sweepable", "apply_one_by_one", "sweep"]

log = logging.getLogger("plait.checkpoint.retention")

SWEEP_OWNER = "plait-retention-sweep"
"""The owner name of the lease a sweep takes while it changes a thread."""

BATCH = 256
"""Groups planned per read of their heads, and changed per transaction on a SQL store: large
enough that the commit's sync is shared by hundreds of threads, small enough that a
transaction holds the write lock for a few tens of milliseconds only."""


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """What a sweep changes in one group, decided before anything changes.

    ``root`` is the top-level thread whose lease covers the group; ``deletes`` go whole
    (subgraph namespaces before their owner), ``prunes`` are reduced to their head's lineage
    (``keep_last=1, branches=False``).
    """

    root: ThreadKey
    deletes: tuple[ThreadKey, ...] = ()
    prunes: tuple[ThreadKey, ...] = ()


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying a sweep's plans did.

    ``pruned`` has, per plan, None where a run holds the group's lease (nothing changed),
    else whether pruning removed any checkpoint of the group; ``removed`` counts the
    checkpoints pruning removed in all (threads deleted whole are counted by the caller, from
    the listing). A total and a flag per plan, not a count per plan: PostgreSQL counts the
    rows a batch's delete removed almost for free, while counting them per thread
    (``RETURNING`` into a ``GROUP BY``) cost 0.15-0.45 s of a 5 s sweep (docs/benchmarks.md,
    "Sweeping").
    """

    pruned: list[bool | None]
    removed: int = 0


class Sweepable(Protocol):
    """The calls of a checkpointer that a sweep uses (every backend has them)."""

    def store_time(self) -> float: ...

    def disk_bytes(self) -> int | None: ...

    async def areclaim_space(self, *, full: bool = False) -> int | None: ...

    async def alist_threads(self) -> list[ThreadInfo]: ...

    async def aget_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None: ...

    async def _alist_for_sweep(self, *, dry_run: bool) -> tuple[list[ThreadInfo], bool]: ...

    async def _acount_checkpoints(self, keys: Sequence[ThreadKey]) -> dict[ThreadKey, int]: ...

    async def aget(
        self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> Checkpoint | None: ...

    async def _aapply_sweep(self, plans: Sequence[GroupPlan], *, share: float = 0.0) -> Applied: ...

    async def _aheads_metadata(self, heads: Sequence[ThreadInfo]) -> list[Any]: ...

    async def atake_lease(
        self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None
    ) -> Lease: ...

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None: ...

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None: ...

    async def aprune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int: ...


@dataclass(slots=True)
class _Tally:
    deleted: list[ThreadKey] = field(default_factory=list)
    reduced: list[ThreadKey] = field(default_factory=list)
    busy: list[ThreadKey] = field(default_factory=list)
    invalid: list[ThreadKey] = field(default_factory=list)
    removed: int = 0


async def sweep(
    store: Sweepable, policy: Retention | None, *, dry_run: bool = False, at: float | None = None
) -> SweepReport:
    """Apply ``policy`` (and every thread's own) to every thread of ``store`` once, judging
    idleness at the store time ``at`` (None: now).

    Returns:
        What was removed, or with ``dry_run`` what would be (nothing is changed then).
    """
    now = store.store_time() if at is None else at
    before = None if dry_run else store.disk_bytes()
    tally = _Tally()
    plans: list[GroupPlan] = []
    sizes: dict[ThreadKey, int] = {}
    listing, counted = await store._alist_for_sweep(dry_run=dry_run)
    groups = list(group_threads(listing).items())
    for start in range(0, len(groups), BATCH):
        chunk = groups[start : start + BATCH]
        idle = [group[0] for _, group in chunk if not any(info.status == "busy" for info in group)]
        metas = dict(zip(((i.namespace, i.thread_id) for i in idle), await store._aheads_metadata(idle), strict=True))
        for root, group in chunk:
            sizes.update(((i.namespace, i.thread_id), i.checkpoints) for i in group)
            plan = await _plan_group(store, policy, root, group, metas.get(root), now, dry_run, tally)
            if plan is not None:
                plans.append(plan)
    listed = sum(sizes.values())
    planned = sum(sizes.get(key, 0) for plan in plans for key in (*plan.deletes, *plan.prunes))
    if plans and not counted:  # the threads deleted whole are counted now, the others by the changes
        sizes.update(await store._acount_checkpoints([key for plan in plans for key in plan.deletes]))
    if plans:
        applied = await store._aapply_sweep(plans, share=planned / listed if listed else 0.0)
        tally.removed += applied.removed
        for plan, pruned in zip(plans, applied.pruned, strict=True):
            if pruned is None:
                tally.busy.append(plan.root)  # a run started since the listing
            else:
                deleted = plan.root in plan.deletes
                removed = sum(sizes.get(key, 0) for key in plan.deletes)
                _count(tally, plan.root, "delete" if deleted else "keep_latest", removed, reduced=pruned)
    freed: int | None = None
    if before is not None and (tally.deleted or tally.reduced):
        await store.areclaim_space()
        after = store.disk_bytes()
        freed = None if after is None else max(0, before - after)
    elif before is not None:
        freed = 0
    return SweepReport(
        dry_run=dry_run,
        deleted=tuple(tally.deleted),
        reduced=tuple(tally.reduced),
        checkpoints_removed=tally.removed,
        skipped_busy=tuple(tally.busy),
        invalid=tuple(tally.invalid),
        bytes_freed=freed,
        policy=policy,
    )


def _rule(metadata: Any, policy: Retention | None, root: ThreadKey, tally: _Tally) -> Retention | None:
    """The policy that applies to the thread whose head has ``metadata`` (None: keep it)."""
    try:
        own = thread_policy(metadata, thread_id=root[1], namespace=root[0])
    except RetentionError as exc:
        log.warning("kept: %s", exc)
        tally.invalid.append(root)
        return None
    if own == NEVER:
        return None
    return own if isinstance(own, Retention) else policy


async def _plan_group(
    store: Sweepable,
    policy: Retention | None,
    root: ThreadKey,
    group: Sequence[ThreadInfo],
    metadata: Any,
    now: float,
    dry_run: bool,
    tally: _Tally,
) -> GroupPlan | None:
    """What to change in one group (None: nothing); a dry run counts it instead.
    ``metadata``: the listed head's (None: the thread is gone since the listing)."""
    if any(info.status == "busy" for info in group):
        if _old_enough(policy, group, now):
            tally.busy.append(root)
        return None
    if metadata is None:
        return None  # deleted since the listing
    rule = _rule(metadata, policy, root, tally)
    if rule is None or not _old_enough(rule, group, now):
        return None
    interrupted = group[0].status == "interrupted"
    if interrupted and rule.keep_interrupted:
        return None
    members = [(info.namespace, info.thread_id) for info in reversed(group)]  # subgraphs first
    if not interrupted and rule.action == "delete":
        if dry_run:
            _count(tally, root, "delete", sum(i.checkpoints for i in group))
            return None
        return GroupPlan(root=root, deletes=tuple(members))
    if len(group) == 1:  # no subgraph namespaces: the thread keeps its head
        kept = {root}
    else:
        head = await store.aget(root[1], namespace=root[0])
        if head is None:
            return None  # deleted since the listing
        kept = {key for key, cp in (await _kept_members(store, group, head)).items() if cp is not None}
    if dry_run:
        _count(tally, root, "keep_latest", sum(i.checkpoints - ((i.namespace, i.thread_id) in kept) for i in group))
        return None
    return GroupPlan(
        root=root,
        deletes=tuple(key for key in members if key not in kept),
        prunes=tuple(key for key in members if key in kept),
    )


async def apply_one_by_one(store: Sweepable, plans: Sequence[GroupPlan]) -> Applied:
    """Apply sweep plans through the protocol's own calls, each group under its top-level
    thread's lease (the default for a backend without a batched ``_aapply_sweep``)."""
    results: list[bool | None] = []
    total = 0
    for plan in plans:
        try:
            lease = await store.atake_lease(plan.root[1], SWEEP_OWNER, namespace=plan.root[0])
        except ThreadBusyError:
            results.append(None)
            continue
        removed = 0
        try:
            for ns, tid in plan.deletes:
                await store.adelete_thread(tid, namespace=ns)
            for ns, tid in plan.prunes:
                removed += await store.aprune(tid, namespace=ns, keep_last=1, branches=False)
        finally:
            if plan.root not in plan.deletes:
                await store.arelease_lease(lease)
        results.append(removed > 0)
        total += removed
    return Applied(results, total)


def _count(tally: _Tally, root: ThreadKey, action: str, removed: int, *, reduced: bool = False) -> None:
    """Count a group's change: ``removed`` checkpoints (``reduced``: and some pruned, counted
    apart)."""
    if action == "delete":
        tally.deleted.append(root)
    elif removed or reduced:
        tally.reduced.append(root)
    tally.removed += removed


def _old_enough(rule: Retention | None, group: Sequence[ThreadInfo], now: float) -> bool:
    """Whether the group's last write is ``rule.after`` seconds old or more."""
    if rule is None:
        return False
    last = max(max(i.updated_at, i.created_at) for i in group)
    return now - last >= rule.after


async def _kept_members(
    store: Sweepable, group: Sequence[ThreadInfo], root_head: Checkpoint
) -> dict[ThreadKey, Checkpoint | None]:
    """Which members of a group ``keep_latest`` keeps, each with its head: the thread, and
    every subgraph namespace that a task planned on its parent's kept head runs (the others
    belong to steps that are gone). Members that go map to None."""
    heads: dict[ThreadKey, Checkpoint | None] = {}
    for info in group:  # owners come before the namespaces they own
        key = (info.namespace, info.thread_id)
        if heads:
            parent = _owner(key, heads)
            parent_head = heads.get((parent, key[1])) if parent is not None else None
            if parent_head is None or not _runs(parent_head, parent or "", key[0]):
                heads[key] = None
                continue
        heads[key] = root_head if not heads else await store.aget(info.thread_id, namespace=info.namespace)
    return heads


def _owner(key: ThreadKey, heads: Mapping[ThreadKey, Any]) -> str | None:
    """The nearest namespace of ``heads`` that owns the thread ``key`` (of the same thread id)."""
    return next((parent for parent in parent_namespaces(key[0]) if (parent, key[1]) in heads), None)


def _runs(parent: Checkpoint, parent_ns: str, namespace: str) -> bool:
    """Whether a task planned on ``parent`` runs the subgraph stored in ``namespace``."""
    segment = namespace[len(parent_ns) + 1 :] if parent_ns else namespace
    segment = segment.split("#", 1)[0]
    return any(segment == f"{task.node}:{task.id}" for task in parent.next_tasks)
