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

__all__ = ["SWEEP_OWNER", "Sweepable", "sweep"]

log = logging.getLogger("plait.checkpoint.retention")

SWEEP_OWNER = "plait-retention-sweep"
"""The owner name of the lease a sweep takes while it changes a thread."""


class Sweepable(Protocol):
    """The calls of a checkpointer that a sweep uses (every backend has them)."""

    def store_time(self) -> float: ...

    def disk_bytes(self) -> int | None: ...

    async def areclaim_space(self) -> None: ...

    async def alist_threads(self) -> list[ThreadInfo]: ...

    async def aget(
        self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
    ) -> Checkpoint | None: ...

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
    for root, group in group_threads(await store.alist_threads()).items():
        await _sweep_group(store, policy, root, group, now, dry_run, tally)
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


def _rule(head: Checkpoint, policy: Retention | None, root: ThreadKey, tally: _Tally) -> Retention | None:
    """The policy that applies to the thread whose head is ``head`` (None: keep it)."""
    try:
        own = thread_policy(head.metadata, thread_id=root[1], namespace=root[0])
    except RetentionError as exc:
        log.warning("kept: %s", exc)
        tally.invalid.append(root)
        return None
    if own == NEVER:
        return None
    return own if isinstance(own, Retention) else policy


async def _sweep_group(
    store: Sweepable,
    policy: Retention | None,
    root: ThreadKey,
    group: Sequence[ThreadInfo],
    now: float,
    dry_run: bool,
    tally: _Tally,
) -> None:
    if any(info.status == "busy" for info in group):
        if _old_enough(policy, group, now):
            tally.busy.append(root)
        return
    head = await store.aget(root[1], namespace=root[0])
    if head is None:
        return  # deleted since the listing
    rule = _rule(head, policy, root, tally)
    if rule is None or not _old_enough(rule, group, now):
        return
    interrupted = group[0].status == "interrupted"
    if interrupted and rule.keep_interrupted:
        return
    action = "keep_latest" if interrupted else rule.action
    if dry_run:
        removed = sum(i.checkpoints for i in group) if action == "delete" else await _reduced_count(store, group)
        _count(tally, root, action, removed)
        return
    try:
        lease = await store.atake_lease(root[1], SWEEP_OWNER, namespace=root[0])
    except ThreadBusyError:
        tally.busy.append(root)  # a run started since the listing
        return
    try:
        if action == "delete":
            removed = 0
            for info in reversed(group):  # the subgraphs' namespaces first, the thread last
                await store.adelete_thread(info.thread_id, namespace=info.namespace)
                removed += info.checkpoints
        else:
            removed = await _reduce(store, group)
    finally:
        if action != "delete":
            await store.arelease_lease(lease)
    _count(tally, root, action, removed)


def _count(tally: _Tally, root: ThreadKey, action: str, removed: int) -> None:
    if action == "delete":
        tally.deleted.append(root)
    elif removed:
        tally.reduced.append(root)
    tally.removed += removed


def _old_enough(rule: Retention | None, group: Sequence[ThreadInfo], now: float) -> bool:
    """Whether the group's last write is ``rule.after`` seconds old or more."""
    if rule is None:
        return False
    last = max(max(i.updated_at, i.created_at) for i in group)
    return now - last >= rule.after


async def _kept_members(store: Sweepable, group: Sequence[ThreadInfo]) -> dict[ThreadKey, Checkpoint | None]:
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
        heads[key] = await store.aget(info.thread_id, namespace=info.namespace)
    return heads


def _owner(key: ThreadKey, heads: Mapping[ThreadKey, Any]) -> str | None:
    """The nearest namespace of ``heads`` that owns the thread ``key`` (of the same thread id)."""
    return next((parent for parent in parent_namespaces(key[0]) if (parent, key[1]) in heads), None)


def _runs(parent: Checkpoint, parent_ns: str, namespace: str) -> bool:
    """Whether a task planned on ``parent`` runs the subgraph stored in ``namespace``."""
    segment = namespace[len(parent_ns) + 1 :] if parent_ns else namespace
    segment = segment.split("#", 1)[0]
    return any(segment == f"{task.node}:{task.id}" for task in parent.next_tasks)


async def _reduced_count(store: Sweepable, group: Sequence[ThreadInfo]) -> int:
    """How many checkpoints ``keep_latest`` would remove from a group."""
    kept = await _kept_members(store, group)
    return sum(i.checkpoints - (1 if kept.get((i.namespace, i.thread_id)) else 0) for i in group)


async def _reduce(store: Sweepable, group: Sequence[ThreadInfo]) -> int:
    """Reduce a group to its head and what the head needs; how many checkpoints went."""
    kept = await _kept_members(store, group)
    removed = 0
    for info in reversed(group):
        if kept.get((info.namespace, info.thread_id)) is None:
            await store.adelete_thread(info.thread_id, namespace=info.namespace)
            removed += info.checkpoints
        else:
            removed += await store.aprune(info.thread_id, namespace=info.namespace, keep_last=1, branches=False)
    return removed
