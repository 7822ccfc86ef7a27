"""Checks of the change feed (:meth:`~plait.checkpoint.base.Checkpointer.achanges`): each
write to a thread is reported with that thread, filters keep other threads out, and closing
ends the feed.

A feed's records are hints (a thread may be reported that did not change), so the checks ask
only that each expected thread comes, within a generous deadline, never how soon.
"""

from __future__ import annotations

import asyncio
import time

from plait.checkpoint.feed import ChangeFeed, ThreadChange
from plait.testing._harness import Checks, Env, ThreadBuilder, expect, fail

check = Checks()

WAIT = 30.0
"""Seconds a check waits for a record that must come."""


async def _reported(feed: ChangeFeed, what: str, *threads: tuple[str, str]) -> set[tuple[str, str]]:
    """Read records until each of ``threads`` (namespace, thread id) came; all read."""
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + WAIT
    while not set(threads) <= seen:
        got = await feed.next(max(deadline - time.monotonic(), 0.0))
        if got is None:
            fail(f"{what}: achanges() never reported {sorted(set(threads) - seen)} (it reported {sorted(seen)})")
        else:
            expect(isinstance(got, ThreadChange), f"achanges() yielded a {type(got).__name__}, not a ThreadChange")
            seen.add((got.namespace, got.thread_id))
    return seen


@check("change_feed")
async def _change_feed(env: Env) -> None:
    """achanges(): commits, leases and deletes each report their thread; filters keep others out; aclose() ends it."""
    cp = await env.new()
    feed = cp.achanges(interval=0.05)
    await asyncio.wait_for(feed.start(), WAIT)
    mine = cp.achanges(namespace="ns", thread_id="t", interval=0.05)
    await asyncio.wait_for(mine.start(), WAIT)
    try:
        one, two = ThreadBuilder("t1"), ThreadBuilder("t", "ns")
        await cp.acommit(checkpoints=[one.step({"n": 1}, root=True)])
        await cp.acommit(checkpoints=[ThreadBuilder("t").step({"n": 1}, root=True)])
        await cp.acommit(checkpoints=[two.step({"n": 1}, root=True)])
        await _reported(feed, "two commits in a row", ("", "t1"), ("", "t"), ("ns", "t"))
        lease = await cp.atake_lease("t1", "checker")
        await _reported(feed, "a lease taken", ("", "t1"))
        await cp.arelease_lease(lease)
        await _reported(feed, "a lease given back", ("", "t1"))
        await cp.adelete_thread("t1")
        await _reported(feed, "a delete", ("", "t1"))
        seen = await _reported(mine, "a feed of one thread", ("ns", "t"))
        expect(seen == {("ns", "t")}, f"achanges(namespace='ns', thread_id='t') reported {sorted(seen)}")
    finally:
        await mine.aclose()
        await feed.aclose()
    expect([c async for c in feed] == [], "a closed feed still yields records")
