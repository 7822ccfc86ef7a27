"""The sweeper deletes expired items at start and after every interval, keeps going after a
failed sweep, and stops when asked: driven by a sleep the test releases and a clock it moves,
never by the wall clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from plait import Store
from plait.store.memory import MemoryItems
from plait.store.sweeper import Sweeper

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Gate:
    """A sleep that returns only when the test lets it: each call is queued with its seconds."""

    def __init__(self) -> None:
        self.asked: asyncio.Queue[tuple[float, asyncio.Future[None]]] = asyncio.Queue()

    async def sleep(self, seconds: float) -> None:
        done = asyncio.get_running_loop().create_future()
        await self.asked.put((seconds, done))
        await done

    async def next(self) -> tuple[float, asyncio.Future[None]]:
        return await asyncio.wait_for(self.asked.get(), 10)


class Flaky(MemoryItems):
    """The in-memory backend with its sweep failing while ``broken`` (a database away)."""

    broken = False

    async def asweep_memory(self, *, now: int) -> int:
        if self.broken:
            raise ConnectionError("the database went away")
        return await super().asweep_memory(now=now)


def rows(store: Store) -> int:
    """Items kept in the backend, expired or not: a store whose clock stands at T0 sees them all."""
    return len(Store(store.backend, clock=lambda: T0).search((), limit=100, refresh_ttl=False))


def test_it_sweeps_at_start_and_after_each_interval() -> None:
    clock = Clock()
    store = Store(clock=clock)
    store.put(("users", "u1"), "short", {"n": 1}, ttl=1)
    store.put(("users", "u1"), "long", {"n": 2}, ttl=30)
    store.put(("users", "u2"), "forever", {"n": 3})

    async def go() -> None:
        gate = Gate()
        async with Sweeper(store, sleep=gate.sleep) as sweeper:
            await sweeper.wait_sweeps(1)
            assert (sweeper.sweeps, sweeper.swept) == (1, 0)  # nothing had expired at start
            seconds, release = await gate.next()
            assert seconds == 3600.0  # the default: an hour
            clock.now += 2 * 60
            release.set_result(None)
            await sweeper.wait_sweeps(2)
            assert sweeper.swept == 1 and rows(store) == 2
            seconds, release = await gate.next()
            clock.now += 60 * 60
            release.set_result(None)
            await sweeper.wait_sweeps(3)
            assert sweeper.swept == 2 and rows(store) == 1
            await gate.next()  # asleep again
        assert not sweeper.running

    asyncio.run(go())
    assert [i.key for i in store.search(())] == ["forever"]


def test_the_interval_comes_from_the_store_unless_given() -> None:
    async def first_sleep(sweeper_store: Store, **options: Any) -> float:
        gate = Gate()
        async with Sweeper(sweeper_store, sleep=gate.sleep, **options):
            seconds, _ = await gate.next()
        return seconds

    assert asyncio.run(first_sleep(Store(ttl={"sweep_interval_minutes": 5}))) == 300.0
    assert asyncio.run(first_sleep(Store(ttl={"sweep_interval_minutes": 5}), every_minutes=0.5)) == 30.0
    for bad in (0, -1, True, "5"):
        with pytest.raises(ValueError, match="every_minutes"):
            Sweeper(Store(), every_minutes=bad)  # type: ignore[arg-type]


def test_a_failed_sweep_is_logged_and_the_next_one_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    backend = Flaky()
    store = Store(backend, clock=clock)
    store.put(("a",), "k", {"v": 1}, ttl=1)
    clock.now += 120

    async def go() -> None:
        gate = Gate()
        backend.broken = True
        async with Sweeper(store, sleep=gate.sleep) as sweeper:
            await sweeper.wait_sweeps(1)
            assert sweeper.failures == 1 and isinstance(sweeper.last_error, ConnectionError)
            assert sweeper.running  # a failure never ends it
            _, release = await gate.next()
            backend.broken = False
            release.set_result(None)
            await sweeper.wait_sweeps(2)
            assert (sweeper.failures, sweeper.swept) == (1, 1)
            assert sweeper.last_error is None

    with caplog.at_level(logging.INFO, logger="plait.store.sweeper"):
        asyncio.run(go())
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed (ConnectionError: the database went away)" in m for m in messages), messages
    assert any("swept 1 expired memory item" in m for m in messages), messages
    assert rows(store) == 0


def test_stop_ends_it_mid_sleep_and_start_runs_it_again() -> None:
    async def go() -> None:
        gate = Gate()
        sweeper = Sweeper(Store(), sleep=gate.sleep)
        await sweeper.astop()  # not started: nothing to stop
        sweeper.start()
        sweeper.start()  # already running: one task
        _, pending = await gate.next()
        await sweeper.astop()
        assert not sweeper.running and pending.cancelled()
        assert gate.asked.empty()
        sweeper.start()
        await sweeper.wait_sweeps(2)
        await gate.next()
        await sweeper.astop()
        assert sweeper.sweeps == 2

    asyncio.run(go())


def test_of_takes_the_shortest_interval_of_the_stores_over_the_same_backend() -> None:
    base = Store()
    hourly = Store(base.backend)
    every_5 = Store(base.backend, ttl={"sweep_interval_minutes": 5})
    every_2 = Store(base.backend, ttl={"sweep_interval_minutes": 2})
    other_db = Store(ttl={"sweep_interval_minutes": 1})
    twice = Store(base.backend, ttl={"sweep_interval_minutes": 120})
    assert Sweeper.of(base).interval == 3600.0
    assert Sweeper.of(base, [None, other_db]).interval == 3600.0  # not this database's
    assert Sweeper.of(base, [hourly, every_5, every_2, other_db]).interval == 120.0
    assert Sweeper.of(base, [twice]).interval == 7200.0  # the graphs' store asks for less often
    assert Sweeper.of(base, [every_2], every_minutes=30).interval == 1800.0
    sweeper = Sweeper.of(base, [every_5])
    assert sweeper.store is every_5 and sweeper.store.backend is base.backend
