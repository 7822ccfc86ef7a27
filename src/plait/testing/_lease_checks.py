"""Checks of leases fenced by generation: one holder per thread, tokens that only grow,
renewals that never take a lost lease back, expiry, a lease taken with the first read of a
run, and given back (with how the run left the thread) by a run's last commit."""

from __future__ import annotations

import asyncio

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.holder import Holder
from plait.checkpoint.model import Fence, Lease, WritesBatch
from plait.errors import LeaseLostError, ThreadBusyError
from plait.testing._harness import (
    Checks,
    Env,
    ThreadBuilder,
    busy,
    expect,
    fail,
    make_writes,
    same,
    same_checkpoint,
    same_writes,
)

check = Checks()


async def _refused(cp: Checkpointer, thread_id: str, owner: str, holder: str, ttl: float, what: str) -> None:
    try:
        await cp.atake_lease(thread_id, owner, ttl=30)
    except ThreadBusyError as exc:
        busy(exc, thread_id, holder, ttl)
    else:
        fail(what)


async def _lost(cp: Checkpointer, lease: Lease, what: str) -> LeaseLostError:
    try:
        await cp.arenew_lease(lease)
    except LeaseLostError as exc:
        same("LeaseLostError.thread_id", exc.thread_id, lease.thread_id)
        same("LeaseLostError.token", exc.token, lease.token)
        return exc
    fail(what)
    raise AssertionError("unreachable")


@check("leases")
async def _leases(env: Env) -> None:
    """One holder per thread: a lease names its owner, token and holder; others get ThreadBusyError."""
    cp = await env.new()
    a = await cp.atake_lease("t", "A", ttl=30)
    same("Lease.thread_id", a.thread_id, "t")
    same("Lease.owner", a.owner, "A")
    expect(a.token >= 1, f"Lease.token is {a.token!r}, expected a positive generation")
    expect(a.expires_at - a.taken_at > 25, f"Lease lasts {a.expires_at - a.taken_at:.1f}s, asked for 30")
    expect(a.holder == Holder.current(), f"Lease.holder is {a.holder!r}, expected this process")
    await _refused(cp, "t", "B", "A", 30, "a second owner took a held lease")
    await _refused(cp, "t", "A", "A", 30, "the same owner name took a held lease again (it must be given back first)")
    other = await cp.atake_lease("u", "B")  # other threads are free
    await cp.arelease_lease(a)
    b = await cp.atake_lease("t", "B")
    expect(b.token > a.token, f"the lease taken after a release has token {b.token}, not above {a.token}")
    await cp.arelease_lease(a)  # a lease given back already: no effect on B's
    await _refused(cp, "t", "A", "B", cp.lease_ttl, "releasing an old lease released the current one")
    await cp.arelease_lease(other)
    await cp.arelease_lease(other)  # twice: nothing happens


@check("lease_renewal")
async def _renewal(env: Env) -> None:
    """A renewal extends the lease it names, even once expired; a lease taken over is never renewed."""
    cp = await env.new()
    short = await cp.atake_lease("short", "A", ttl=0.2)
    kept = await cp.atake_lease("kept", "A", ttl=0.2)
    renewed = await cp.arenew_lease(kept, ttl=60)
    same("the renewed lease's token", renewed.token, kept.token)
    expect(renewed.expires_at > kept.expires_at + 30, "a renewal did not push the expiry out")
    await asyncio.sleep(0.6)  # both first lives are over
    await _refused(cp, "kept", "B", "A", 60, "a renewed lease expired at its first ttl")
    again = await cp.arenew_lease(short, ttl=30)  # expired, nobody took it: still A's
    same("the token of an expired lease renewed", again.token, short.token)
    await _refused(cp, "short", "B", "A", 30, "a lease renewed after it expired was not held")
    expiring = await cp.arenew_lease(again, ttl=0.2)
    await asyncio.sleep(0.6)
    taker = await cp.atake_lease("short", "B", ttl=30)  # expired: taken over
    expect(taker.token > short.token, f"the lease taken over has token {taker.token}, not above {short.token}")
    lost = await _lost(cp, expiring, "a renewal took back a lease another owner had taken over")
    same("LeaseLostError.taken_by", lost.taken_by, "B")
    await _refused(cp, "short", "A", "B", 30, "a failed renewal changed the taker's lease")
    await cp.arelease_lease(taker)
    await _lost(cp, taker, "a lease given back was renewed")


@check("lease_generations")
async def _generations(env: Env) -> None:
    """Tokens only grow: across releases, expiry, takeovers and deleting the thread."""
    cp = await env.new()
    seen: list[int] = []
    lease = await cp.atake_lease("t", "A")
    seen.append(lease.token)
    await cp.arelease_lease(lease)
    lease = await cp.atake_lease("t", "B", ttl=0.2)
    seen.append(lease.token)
    await asyncio.sleep(0.6)
    lease = await cp.atake_lease("t", "C")
    seen.append(lease.token)
    th = ThreadBuilder("t")
    await cp.acommit(checkpoints=[th.step({"n": 1}, root=True)], fence=Fence(owner="C", token=lease.token))
    await cp.adelete_thread("t")
    await _lost(cp, lease, "a lease survived the deletion of its thread")
    lease = await cp.atake_lease("t", "D")
    seen.append(lease.token)
    expect(seen == sorted(set(seen)), f"lease tokens did not grow at every take: {seen}")


@check("lease_and_get")
async def _lease_and_get(env: Env) -> None:
    """take_lease_and_get takes the lease, then reads the head (or a checkpoint by id)."""
    cp = await env.new()
    lease, found = await cp.atake_lease_and_get("empty", "A", ttl=30)
    expect(found is None, "take_lease_and_get on a thread without checkpoints read one")
    same("the lease's owner", lease.owner, "A")
    await _refused(cp, "empty", "B", "A", 30, "take_lease_and_get did not take the lease")
    th = ThreadBuilder("t")
    first = th.step({"n": 1, "log": ["a"]}, root=True)
    second = th.step({"log": ["a", "b"]})
    saved = make_writes(("task", "result", "k", {"w": 1}))
    await cp.acommit(
        checkpoints=[first, second],
        writes=[WritesBatch(thread_id="t", checkpoint_id=second.checkpoint.id, writes=saved)],
    )
    lease, head = await cp.atake_lease_and_get("t", "A", ttl=30)
    same_checkpoint("the head read with the lease", head, second.checkpoint)
    assert head is not None
    same_writes("the head's pending writes read with the lease", head.pending_writes, saved)
    await cp.arelease_lease(lease)
    lease, by_id = await cp.atake_lease_and_get("t", "A", first.checkpoint.id, ttl=30)
    same_checkpoint("a checkpoint read by id with the lease", by_id, first.checkpoint)
    await cp.arelease_lease(lease)
    lease, missing = await cp.atake_lease_and_get("t", "A", "no-such-checkpoint")
    expect(missing is None, "take_lease_and_get read a checkpoint id the thread does not have")
    try:
        await cp.atake_lease_and_get("t", "B", ttl=30)
    except ThreadBusyError as exc:
        busy(exc, "t", "A", cp.lease_ttl)
    else:
        fail("take_lease_and_get took a lease another owner holds")


@check("lease_released_with_commit")
async def _released_with_commit(env: Env) -> None:
    """A commit fenced with release=True gives its lease back, leaving the status it names; a refused one does not."""
    cp = await env.new()
    th = ThreadBuilder("t")
    lease = await cp.atake_lease("t", "A", ttl=30)
    root = th.step({"n": 1}, root=True)
    await cp.acommit(checkpoints=[root], fence=Fence(owner="A", token=lease.token))
    last = th.step({"n": 2})
    await cp.acommit(checkpoints=[last], fence=Fence(owner="A", token=lease.token, release=True, status="idle"))
    same_checkpoint("the last checkpoint of a run", await cp.aget("t"), last.checkpoint)
    info = await cp.aget_thread("t")
    expect(info is not None and info.status == "idle", f"a run's last commit left the thread {info!r}")
    taker = await cp.atake_lease("t", "B", ttl=30)  # free at once: released by the commit
    refused = th.step({"n": 3})
    try:
        await cp.acommit(checkpoints=[refused], fence=Fence(owner="A", token=lease.token, release=True))
    except LeaseLostError as exc:
        same("LeaseLostError.taken_by", exc.taken_by, "B")
    else:
        fail("a commit under a lease that was taken over was stored")
    same_checkpoint("the head after a refused release", await cp.aget("t"), last.checkpoint)
    await _refused(cp, "t", "A", "B", 30, "a refused commit with release=True released another owner's lease")
    await cp.arelease_lease(taker, status="interrupted")
    info = await cp.aget_thread("t")
    expect(info is not None and info.status == "interrupted", f"a released lease left the thread {info!r}")
