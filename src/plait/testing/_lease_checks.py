"""Checks of leases: one owner per thread, renewal, release and expiry."""

from __future__ import annotations

import asyncio

from plait.errors import ThreadBusyError
from plait.testing._harness import Checks, Env, busy, fail

check = Checks()


@check("leases")
async def _leases(env: Env) -> None:
    """One owner per thread: renew by the same owner, ThreadBusyError for others, release."""
    cp = await env.new()
    await cp.acquire_lease("t", "A", ttl=30)
    await cp.acquire_lease("t", "A", ttl=30)  # renewal
    try:
        await cp.acquire_lease("t", "B", ttl=30)
    except ThreadBusyError as exc:
        busy(exc, "t", "A", 30)
    else:
        fail("a second owner acquired a held lease")
    await cp.release_lease("t", "B")  # not the holder: no effect
    try:
        await cp.acquire_lease("t", "B")
    except ThreadBusyError:
        pass
    else:
        fail("release_lease by a non-holder released the lease")
    await cp.acquire_lease("u", "B")  # other threads are free
    await cp.release_lease("t", "A")
    await cp.acquire_lease("t", "B")
    try:
        await cp.acquire_lease("t", "A")
    except ThreadBusyError as exc:
        busy(exc, "t", "B", cp.lease_ttl)
    else:
        fail("the lease taken after a release is not held")
    await cp.release_lease("never-leased", "A")


@check("lease_expiry")
async def _lease_expiry(env: Env) -> None:
    """An expired lease can be taken over; a renewal pushes the expiry out."""
    cp = await env.new()
    await cp.acquire_lease("short", "A", ttl=0.2)
    await cp.acquire_lease("renewed", "A", ttl=0.2)
    await cp.acquire_lease("renewed", "A", ttl=60)
    await asyncio.sleep(0.6)
    await cp.acquire_lease("short", "B", ttl=30)  # expired: taken over
    try:
        await cp.acquire_lease("renewed", "B")
    except ThreadBusyError as exc:
        busy(exc, "renewed", "A", 60)
    else:
        fail("a renewed lease expired at its original ttl")
    try:
        await cp.acquire_lease("short", "A")
    except ThreadBusyError as exc:
        busy(exc, "short", "B", 30)
    else:
        fail("the previous holder took back a lease another owner had taken over")
