"""The runs database's connections: one given back while its task is being cancelled still
reaches the request waiting for it (plait serve hung for 30 s when a client dropped a stream).

The test stands where the loss happened: psycopg_pool takes a waiting request off its queue,
then waits for that request's lock to wake it. The test holds that lock, so the return must
wait there, and cancels the returning task as Starlette cancels a stream whose client went
away (an anyio cancel scope, which cancels every await after it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from plait.runs._db import Database, borrow

pytestmark = pytest.mark.postgres


async def _give_back_while_cancelled(dsn: str, lend: Callable[[Any], Any]) -> bool:
    """Whether a request waiting for the pool's only connection gets it when the task that
    held it is cancelled as it gives it back (``lend``: how the holder borrows it)."""
    db = Database(dsn, max_connections=1)
    await db.open()
    pool = db.pool
    holding, give_back = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        with anyio.CancelScope() as scope:
            async with lend(pool):
                holding.set()
                await give_back.wait()
                scope.cancel()  # from here on every await of this task is cancelled

    async def waiter() -> int:
        async with borrow(pool) as conn, conn.cursor() as cur:
            await cur.execute("SELECT 1")
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

    try:
        held = asyncio.create_task(holder())
        await holding.wait()
        waiting = asyncio.create_task(waiter())
        while not pool._waiting:  # the waiter is queued for the connection
            await asyncio.sleep(0)
        request = pool._waiting[0]
        while not request._cond._waiters:  # and asleep on its condition, the lock free
            await asyncio.sleep(0)
        await request._cond.acquire()  # a return must now wait for this lock
        give_back.set()
        await held
        request._cond.release()
        try:
            return await asyncio.wait_for(waiting, 5) == 1
        except TimeoutError:
            return False
        finally:
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting
    finally:
        await db.close()


def test_a_connection_given_back_by_a_cancelled_task_reaches_the_waiting_request(postgres_dsn: str) -> None:
    assert asyncio.run(_give_back_while_cancelled(postgres_dsn, borrow))


def test_the_pools_own_context_manager_loses_that_request(postgres_dsn: str) -> None:
    """Why :func:`borrow` exists: if psycopg_pool fixes this, this test fails and borrow can go."""
    assert not asyncio.run(_give_back_while_cancelled(postgres_dsn, lambda pool: pool.connection()))
