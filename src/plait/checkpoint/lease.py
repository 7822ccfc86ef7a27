"""Leases fenced by generation, and how a thread stands: the rules every backend applies.

One run per thread at a time is kept by a lease. Taking a lease mints a new *generation*
(a strictly increasing token per thread); every commit, renewal and effect record a run
makes carries that token, and the store refuses it unless that lease is still the thread's
current one. So a run that stalled (a stopped process, a long GC pause, a lost network)
past its lease, and whose thread another run took over, can never write again, even after
the new lease expired or was released: its token is no longer the current one. A renewal
never takes a lost lease back: it extends the lease it names or fails.

A lease whose holder is provably dead (same machine, see :class:`~plait.checkpoint.holder.Holder`)
is taken over at once, without waiting for it to expire.

Each thread has one *thread row* (the lease, plus how the thread stands when no run holds
it), written when a lease is taken, renewed or given back and by one-off writes
(``update_state``, a fork, a commit without a run), never by the steps of a run in between:
a step's commit only reads it. The status a user sees (:data:`Status`) is derived:

* ``busy``: a lease is held and not expired (and its holder not provably dead);
* ``stale``: a lease is held but expired or its holder is dead (a crashed or stalled run), or
  no lease is held and the thread has unfinished work: it needs a resume;
* otherwise what was stored when the thread came to rest: ``idle`` (finished, nothing next),
  ``interrupted`` (waiting for input) or ``error`` (a task failed; the error is stored).

The memory, file and SQLite backends apply these functions to the row in Python, inside
their write lock or transaction; PostgreSQL applies the same rules in its functions
(:mod:`plait.checkpoint.sql._schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, get_args

from plait.checkpoint.holder import Holder
from plait.checkpoint.model import (
    Checkpoint,
    CheckpointWrite,
    Fence,
    Lease,
    PendingWrite,
    RestStatus,
    Status,
    Task,
    ThreadInfo,
    WritesBatch,
    quiet_parent,
)
from plait.errors import ConcurrentUpdateError, LeaseLostError, ThreadBusyError

__all__ = [
    "LeaseRow",
    "busy_error",
    "check_fence",
    "check_quiet_parent",
    "lost_error",
    "release",
    "renew",
    "rest_status",
    "revoked",
    "settled",
    "shown_status",
    "stored_rest",
    "take",
    "under_parent",
]

_REST_STATUSES: Final[frozenset[str]] = frozenset(get_args(RestStatus))


@dataclass(slots=True, kw_only=True)
class LeaseRow:
    """A thread's row as a backend keeps it: the current (or last) lease and the status at rest."""

    gen: int = 0
    """The generation of the current or last lease (0: none was ever taken)."""
    owner: str | None = None
    holder: Holder | None = None
    taken_at: float = 0.0
    expires_at: float = 0.0
    held: bool = False
    """Whether lease ``gen`` is held (False once given back or revoked)."""
    status: RestStatus = "idle"
    updated_at: float = 0.0

    def lease(self, thread_id: str, namespace: str) -> Lease | None:
        """The lease held now, expired or not; None when none is held."""
        if not self.held or self.owner is None:
            return None
        return Lease(
            thread_id=thread_id,
            namespace=namespace,
            owner=self.owner,
            token=self.gen,
            taken_at=self.taken_at,
            expires_at=self.expires_at,
            holder=self.holder,
        )


def busy_error(row: LeaseRow, thread_id: str, namespace: str, now: float) -> ThreadBusyError:
    """The error for a thread whose live lease refuses a caller."""
    alive = row.holder.alive() if row.holder is not None else None
    return ThreadBusyError(
        thread_id,
        row.owner or "another run",
        max(0.0, row.expires_at - now),
        namespace=namespace,
        holder=row.holder,
        alive=alive,
        token=row.gen,
    )


def _live(row: LeaseRow, now: float) -> bool:
    """Whether the row's lease keeps others out: held, unexpired, and its holder not dead."""
    if not row.held or row.expires_at <= now:
        return False
    return row.holder is None or row.holder.alive() is not False


def take(
    row: LeaseRow | None,
    *,
    thread_id: str,
    namespace: str,
    owner: str,
    ttl: float,
    now: float,
    holder: Holder,
) -> LeaseRow:
    """The row after ``owner`` takes the thread's lease: a new generation.

    Taken when no lease is held, when the held one expired, or when its holder is provably
    dead. Another holder's live lease refuses it, even one with the same owner name (runs
    name themselves uniquely; a worker re-entering with its own owner takes a new lease only
    once the old one is given back).

    Raises:
        ThreadBusyError: a live lease is held; the error says by whom, whether that
            process is alive on this machine, and when the lease ends.
    """
    if row is not None and _live(row, now):
        raise busy_error(row, thread_id, namespace, now)
    base = row if row is not None else LeaseRow(updated_at=now)
    return replace(
        base,
        gen=base.gen + 1,
        owner=owner,
        holder=holder,
        taken_at=now,
        expires_at=now + ttl,
        held=True,
        updated_at=now,
    )


def lost_error(row: LeaseRow | None, lease_token: int, thread_id: str, namespace: str) -> LeaseLostError:
    """The error for a write made under a lease that is no longer the thread's current one."""
    if row is None:
        return LeaseLostError(thread_id, lease_token, namespace=namespace, reason="the thread has no lease any more")
    if row.gen == lease_token:
        return LeaseLostError(
            thread_id, lease_token, namespace=namespace, reason="the lease was given back", taken_at=row.updated_at
        )
    return LeaseLostError(
        thread_id,
        lease_token,
        namespace=namespace,
        taken_by=row.owner,
        taken_at=row.taken_at,
        holder=row.holder,
    )


def renew(row: LeaseRow | None, lease: Lease, *, ttl: float, now: float) -> LeaseRow:
    """The row after ``lease`` is renewed for ``ttl`` more seconds.

    A renewal extends the lease it names, even one that expired meanwhile (nobody took the
    thread, so the run's writes are still the only ones), and never takes a lost lease back.

    Raises:
        LeaseLostError: the lease is no longer the thread's current one.
    """
    if row is None or row.gen != lease.token or not row.held:
        raise lost_error(row, lease.token, lease.thread_id, lease.namespace)
    return replace(row, expires_at=now + ttl)


def release(row: LeaseRow | None, token: int, *, status: RestStatus | None, now: float) -> LeaseRow | None:
    """The row after the lease of generation ``token`` is given back; None when that lease is
    not held any more (nothing to change: a lease lost is not the loser's to release).

    ``status`` is how the run left the thread (None: as it was before the run).
    """
    if row is None or row.gen != token or not row.held:
        return None
    return replace(row, held=False, status=status or row.status, updated_at=now)


def revoked(row: LeaseRow, *, owner: str, status: RestStatus, now: float) -> LeaseRow:
    """The row after its lease is revoked by an operation that rewrote the thread under it
    (a delete, a prune back to a checkpoint): a new generation that nobody holds, so a run
    that held the old one can write nothing more, and how the thread now stands."""
    return replace(row, gen=row.gen + 1, owner=owner, holder=None, held=False, status=status, updated_at=now)


def check_fence(row: LeaseRow | None, fence: Fence, *, thread_id: str, namespace: str, now: float) -> LeaseRow | None:
    """Check a fenced commit's lease condition on one thread it touches.

    With ``fence.token`` (a run's commit): the lease of that generation must still be the
    thread's current one and held; its expiry does not matter (nobody took it). Without (a
    one-off write such as ``update_state``): no live lease may be held; an expired lease is
    revoked by the write, so that the stalled run holding it can never write after it.

    Returns:
        The row to store when the check changed it (a revoked lease), else None.

    Raises:
        LeaseLostError: the run's lease was taken over, given back or revoked.
        ThreadBusyError: a one-off write found a live lease.
    """
    if fence.token is not None:
        if row is None or row.gen != fence.token or not row.held:
            raise lost_error(row, fence.token, thread_id, namespace)
        return None
    if row is None or not row.held:
        return None
    if row.expires_at > now:
        raise busy_error(row, thread_id, namespace, now)
    return replace(row, gen=row.gen + 1, owner=fence.owner, holder=None, taken_at=now, expires_at=0.0, held=False)


def rest_status(next_tasks: Sequence[Task], writes: Iterable[PendingWrite]) -> RestStatus:
    """How a checkpoint leaves its thread when no run holds it, from its next tasks and its
    pending writes: ``error`` when a task failed, ``interrupted`` when an interrupt (or a
    breakpoint) waits for an answer, ``stale`` when tasks are still to run, else ``idle``.

    An interrupt waits while its task has no result and fewer resume values than its index
    (as :func:`plait.checkpoint.model.waiting_interrupts` reads them).
    """
    writes = list(writes)
    if any(w.kind == "error" for w in writes):
        return "error"
    done = {w.task_id for w in writes if w.kind == "result"}
    resumed = {
        w.task_id: len(w.value) if isinstance(w.value, list | tuple) else 0 for w in writes if w.kind == "resume"
    }
    for w in writes:
        if w.kind == "breakpoint":
            return "interrupted"
        if w.kind == "interrupt" and w.task_id not in done:
            index = w.value.get("index", 0) if hasattr(w.value, "get") else 0
            if not isinstance(index, int) or index >= resumed.get(w.task_id, 0):
                return "interrupted"
    return "ready" if next_tasks else "idle"


def stored_rest(status: Any) -> RestStatus:
    """A status at rest as a store read it back: ``stale`` as stored by plait before
    ``ready`` existed meant what ``ready`` means (a run gave the thread back with work to
    do; a run that died never gives it back), and a value plait does not know is shown
    ``stale`` (something to look at)."""
    if status == "stale":
        return "ready"
    return status if status in _REST_STATUSES else "stale"


def settled(checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch]) -> dict[tuple[str, str], RestStatus]:
    """How a one-off commit leaves each thread it touches, from what it stores: for a thread
    with a checkpoint in the commit, its newest one with the writes the commit saves on it;
    for a thread with writes only, what those say (an error or an interrupt; nothing else
    changes how it stands)."""
    if len(checkpoints) == 1 and not writes:  # the usual one: an update or a fork, nothing pending
        cp = checkpoints[0].checkpoint
        return {(cp.namespace, cp.thread_id): "ready" if cp.next_tasks else "idle"}
    newest: dict[tuple[str, str], Checkpoint] = {}
    for cw in checkpoints:
        cp = cw.checkpoint
        key = (cp.namespace, cp.thread_id)
        if key not in newest or cp.id > newest[key].id:
            newest[key] = cp
    saved: dict[tuple[str, str, str], list[PendingWrite]] = {}
    for batch in writes:
        saved.setdefault((batch.namespace, batch.thread_id, batch.checkpoint_id), []).extend(batch.writes)
    out: dict[tuple[str, str], RestStatus] = {
        key: rest_status(cp.next_tasks, saved.get((*key, cp.id), ())) for key, cp in newest.items()
    }
    for (ns, tid, _cid), found in saved.items():
        if (ns, tid) not in out:
            status = rest_status((), found)
            if status != "idle":
                out[(ns, tid)] = status
    return out


def shown_status(row: LeaseRow | None, now: float, fallback: RestStatus = "idle") -> Status:
    """The status a user sees: ``busy`` while a live lease is held, ``stale`` while a lease
    is held but expired or its holder is dead, else the status the thread came to rest in
    (``fallback`` when it has no row)."""
    if row is None:
        return fallback
    if row.held:
        return "busy" if _live(row, now) else "stale"
    return stored_rest(row.status)


def under_parent(info: ThreadInfo, parent: Status | None) -> ThreadInfo:
    """A subgraph's namespace as listed: it belongs to its parent thread, whose run runs it
    (under the parent's lease, taking none of its own), so while the parent is ``busy`` (or
    ``stale``) so is the namespace, whatever its own row says; ``parent`` is the parent's
    shown status (None: unknown or not held)."""
    if info.namespace and parent in ("busy", "stale") and info.status != parent:
        return replace(info, status=parent)
    return info


def check_quiet_parent(
    checkpoints: Sequence[CheckpointWrite],
    fence: Fence,
    stored: Callable[[str, str, str], bool],
    has_writes: Callable[[str, str, str], bool],
) -> None:
    """Apply :attr:`Fence.expect_parent_no_writes` (every backend's rule, its reads its own):
    ``stored`` and ``has_writes`` answer for a ``(namespace, thread_id, checkpoint_id)``,
    inside the commit's transaction.

    Raises:
        ConcurrentUpdateError: (``parent``) the parent is gone, or has pending writes.
        ValueError: asked of a commit whose first checkpoint has no parent.
    """
    where = quiet_parent(checkpoints, fence)
    if where is None:
        return
    _, thread_id, parent_id = where
    if not stored(*where):
        raise ConcurrentUpdateError(thread_id, parent_id, None, parent=True)
    if has_writes(*where):
        raise ConcurrentUpdateError(thread_id, parent_id, parent_id, pending_writes=True, parent=True)
