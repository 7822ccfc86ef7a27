"""Checks of leases: one owner per thread, renewal, release and expiry, a lease taken with the
first read of a run, and given back by a run's last commit."""

from __future__ import annotations

import asyncio

from plait.checkpoint.base import Fence, WritesBatch
from plait.errors import ThreadBusyError
from plait.testing._harness import (
    Checks,
    Env,
    ThreadBuilder,
    busy,
    fail,
    make_writes,
    same_checkpoint,
    same_writes,
)

check = Checks()


@check("leases")
async def _leases(env: Env) -> None:
    """One owner per thread: renew by the same owner, ThreadBusyError for others, release."""
    cp = await env.new()
    await cp.atake_lease("t", "A", ttl=30)
    await cp.atake_lease("t", "A", ttl=30)  # renewal
    try:
        await cp.atake_lease("t", "B", ttl=30)
    except ThreadBusyError as exc:
        busy(exc, "t", "A", 30)
    else:
        fail("a second owner acquired a held lease")
    await cp.arelease_lease("t", "B")  # not the holder: no effect
    try:
        await cp.atake_lease("t", "B")
    except ThreadBusyError:
        pass
    else:
        fail("release_lease by a non-holder released the lease")
    await cp.atake_lease("u", "B")  # other threads are free
    await cp.arelease_lease("t", "A")
    await cp.atake_lease("t", "B")
    try:
        await cp.atake_lease("t", "A")
    except ThreadBusyError as exc:
        busy(exc, "t", "B", cp.lease_ttl)
    else:
        fail("the lease taken after a release is not held")
    await cp.arelease_lease("never-leased", "A")


@check("lease_expiry")
async def _lease_expiry(env: Env) -> None:
    """An expired lease can be taken over; a renewal pushes the expiry out."""
    cp = await env.new()
    await cp.atake_lease("short", "A", ttl=0.2)
    await cp.atake_lease("renewed", "A", ttl=0.2)
    await cp.atake_lease("renewed", "A", ttl=60)
    await asyncio.sleep(0.6)
    await cp.atake_lease("short", "B", ttl=30)  # expired: taken over
    try:
        await cp.atake_lease("renewed", "B")
    except ThreadBusyError as exc:
        busy(exc, "renewed", "A", 60)
    else:
        fail("a renewed lease expired at its original ttl")
    try:
        await cp.atake_lease("short", "A")
    except ThreadBusyError as exc:
        busy(exc, "short", "B", 30)
    else:
        fail("the previous holder took back a lease another owner had taken over")


@check("lease_and_get")
async def _lease_and_get(env: Env) -> None:
    """acquire_lease_and_get takes the lease, then reads the head (or a checkpoint by id)."""
    cp = await env.new()
    if await cp.atake_lease_and_get("empty", "A", ttl=30) is not None:
        fail("acquire_lease_and_get on a thread without checkpoints read one")
    try:
        await cp.atake_lease("empty", "B")
    except ThreadBusyError as exc:
        busy(exc, "empty", "A", 30)
    else:
        fail("acquire_lease_and_get did not take the lease")
    th = ThreadBuilder("t")
    first = th.step({"n": 1, "log": ["a"]}, root=True)
    second = th.step({"log": ["a", "b"]})
    saved = make_writes(("task", "result", "k", {"w": 1}))
    await cp.acommit(
        checkpoints=[first, second],
        writes=[WritesBatch(thread_id="t", checkpoint_id=second.checkpoint.id, writes=saved)],
    )
    head = await cp.atake_lease_and_get("t", "A", ttl=30)
    same_checkpoint("the head read with the lease", head, second.checkpoint)
    assert head is not None
    same_writes("the head's pending writes read with the lease", head.pending_writes, saved)
    same_checkpoint(
        "a checkpoint read by id with the lease",
        await cp.atake_lease_and_get("t", "A", first.checkpoint.id, ttl=30),
        first.checkpoint,
    )
    if await cp.atake_lease_and_get("t", "A", "no-such-checkpoint") is not None:
        fail("acquire_lease_and_get read a checkpoint id the thread does not have")
    try:
        await cp.atake_lease_and_get("t", "B", ttl=30)
    except ThreadBusyError as exc:
        busy(exc, "t", "A", cp.lease_ttl)
    else:
        fail("acquire_lease_and_get took a lease another owner holds")


@check("lease_released_with_commit")
async def _released_with_commit(env: Env) -> None:
    """A commit fenced with release=True gives its owner's lease back; a refused one does not.

    Only for backends whose releases_with_commit is True; the lease goes back once the
    commit is stored."""
    cp = await env.new()
    if not cp.releases_with_commit:
        return
    th = ThreadBuilder("t")
    await cp.atake_lease("t", "A", ttl=30)
    root = th.step({"n": 1}, root=True)
    await cp.acommit(checkpoints=[root], fence=Fence(owner="A"))
    last = th.step({"n": 2})
    await cp.acommit(checkpoints=[last], fence=Fence(owner="A", release=True))
    same_checkpoint("the last checkpoint of a run", await cp.aget("t"), last.checkpoint)
    await cp.atake_lease("t", "B", ttl=30)  # free at once: released by the commit
    refused = th.step({"n": 3})
    try:
        await cp.acommit(checkpoints=[refused], fence=Fence(owner="A", release=True))
    except ThreadBusyError as exc:
        busy(exc, "t", "B", 30)
    else:
        fail("a commit fenced by owner 'A' was stored while 'B' held the thread's lease")
    same_checkpoint("the head after a refused release", await cp.aget("t"), last.checkpoint)
    try:
        await cp.atake_lease("t", "A")
    except ThreadBusyError:
        pass
    else:
        fail("a refused commit with release=True released another owner's lease")
    alone = ThreadBuilder("u").step({"n": 1}, root=True)
    await cp.acommit(checkpoints=[alone], fence=Fence(owner="A", release=True))
    same_checkpoint("a released commit on a thread without a lease", await cp.aget("u"), alone.checkpoint)
