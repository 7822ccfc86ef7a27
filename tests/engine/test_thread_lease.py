"""The lease context: what the engine enters per run and a worker can enter under its own
owner."""

from __future__ import annotations

import asyncio

import pytest

from plait import MemoryCheckpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite
from plait.engine.lease import ThreadLease
from plait.errors import LeaseLostError, ThreadBusyError
from plait.testing import ManualClock


def _seed(cp: MemoryCheckpointer, thread_id: str) -> None:
    cp.commit(
        checkpoints=[
            CheckpointWrite(
                checkpoint=Checkpoint(thread_id=thread_id, id="c1", parent_id=None, step=0, values={}),
                changed=frozenset(),
            )
        ]
    )


def test_entering_takes_the_lease_under_the_given_owner_and_reads_the_head() -> None:
    cp = MemoryCheckpointer()
    _seed(cp, "t")

    async def main() -> None:
        async with ThreadLease(cp, "t", "worker-3:job-17") as hold:
            assert hold.head is not None and hold.head.id == "c1"
            info = await cp.aget_thread("t")
            assert info is not None and info.lease is not None and info.lease.owner == "worker-3:job-17"
            assert info.status == "busy"
            hold.rest = "interrupted"
        info = await cp.aget_thread("t")
        assert info is not None and info.lease is None and info.status == "interrupted"

    asyncio.run(main())


def test_a_second_holder_is_refused_at_once_or_waits_for_the_first() -> None:
    cp = MemoryCheckpointer()
    _seed(cp, "t")

    async def main() -> None:
        first = ThreadLease(cp, "t", "first")
        await first.__aenter__()
        with pytest.raises(ThreadBusyError) as busy:
            async with ThreadLease(cp, "t", "second"):
                pass
        assert busy.value.owner == "first"
        waiting = asyncio.ensure_future(ThreadLease(cp, "t", "second", wait=30).__aenter__())
        await asyncio.sleep(0.06)
        assert not waiting.done()
        await first.__aexit__(None, None, None)
        second = await asyncio.wait_for(waiting, 10)
        assert second.lease is not None and second.lease.token > (first.lease.token if first.lease else 0)
        await second.__aexit__(None, None, None)

    asyncio.run(main())


def test_a_lease_taken_over_after_it_expired_is_lost_and_never_given_back() -> None:
    clock = ManualClock()
    cp = MemoryCheckpointer(lease_ttl=5, clock=clock)
    _seed(cp, "t")

    async def main() -> None:
        hold = ThreadLease(cp, "t", "stalled")
        await hold.__aenter__()
        hold.stop_renewing()  # a stalled process renews nothing
        clock.advance(6)
        taker = await cp.atake_lease("t", "taker")
        with pytest.raises(LeaseLostError):
            await hold.confirm()
        with pytest.raises(LeaseLostError):
            hold.check()
        await hold.__aexit__(None, None, None)  # gives nothing back: the lease is not its own
        info = await cp.aget_thread("t")
        assert info is not None and info.lease is not None and info.lease.token == taker.token

    asyncio.run(main())


def test_a_negative_wait_is_refused() -> None:
    with pytest.raises(ValueError, match="wait"):
        ThreadLease(MemoryCheckpointer(), "t", "o", wait=-1)
