"""Flow control across every worker: a concurrency limit per graph and a start-rate limit.

Procrastinate has per-worker concurrency and per-key locks, not a limit across workers on how
many runs of one graph run at once, nor on how fast they start (what an LLM quota needs).
Both are built small here, on the database the workers share:

* **max_running**: a run holds one of N slots, each a session-level advisory lock
  ``(graph, i)`` on a connection of its own, for as long as it runs. PostgreSQL frees the
  lock when that connection ends, so a worker killed mid-run frees its slot by dying: no
  slot leaks, and no sweeper is needed. At most N locks exist, so at most N runs run.
* **starts_per_second**: a token bucket in ``plait_run_limit``, refilled and spent by one
  UPDATE on the server's clock, so two workers can never spend the same token: over any
  window of T seconds at most ``burst + rate * T`` runs start.

A run waiting for a slot or a token stays ``pending`` and keeps its worker's job slot
(polling with backoff); runs over a limit are expected to be the exception, not the rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

from plait.runs._db import borrow

__all__ = ["REREAD", "Limits"]

_SLOT_LOCK = 0x706C5300  # first key base of the slot locks
_MAX_PAUSE = 0.25
REREAD = 1.0
"""Seconds a worker keeps a graph's limits before reading them again."""


class Limits:
    """The limits of the graphs one worker runs (read from the database, cached briefly)."""

    def __init__(self, dsn: str, connect_kwargs: dict[str, Any], pool: Any) -> None:
        self._dsn = dsn
        self._kwargs = connect_kwargs
        self._pool = pool
        self._cache: dict[str, tuple[float, int | None, float | None]] = {}
        self._limited: tuple[float, frozenset[str]] | None = None

    async def limited(self, graphs: frozenset[str]) -> frozenset[str]:
        """Which of ``graphs`` have a limit, read by one query at most once per :data:`REREAD`
        seconds (as :meth:`_limit`), so that the runs of the others can start without a
        query of their own."""
        now = time.monotonic()
        if self._limited is not None and now - self._limited[0] < REREAD:
            return self._limited[1]
        async with borrow(self._pool) as conn, conn.cursor() as cur:
            await cur.execute(
                "SELECT graph FROM plait_run_limit WHERE graph = ANY(%s) "
                "AND (max_running IS NOT NULL OR rate IS NOT NULL)",
                (sorted(graphs),),
            )
            found = frozenset(r[0] for r in await cur.fetchall())
        self._limited = (now, found)
        return found

    async def _limit(self, graph: str) -> tuple[int | None, float | None]:
        """The graph's limits, read at most once per :data:`REREAD` seconds: a query per run
        start would cost more than the limits save, and a changed limit holds within that time."""
        now = time.monotonic()
        cached = self._cache.get(graph)
        if cached is not None and now - cached[0] < REREAD:
            return cached[1], cached[2]
        async with borrow(self._pool) as conn, conn.cursor() as cur:
            await cur.execute("SELECT max_running, rate FROM plait_run_limit WHERE graph = %s", (graph,))
            row = await cur.fetchone()
        found = (None, None) if row is None else (row[0], row[1])
        self._cache[graph] = (now, *found)
        return found

    @contextlib.asynccontextmanager
    async def admitted(self, graph: str) -> AsyncIterator[None]:
        """Wait until ``graph``'s limits let one more run start, and hold its slot inside."""
        max_running, rate = await self._limit(graph)
        if max_running is None and rate is None:
            yield
            return
        conn = await self._slot(graph, max_running) if max_running is not None else None
        try:
            if rate is not None:
                await self._token(graph)
            yield
        finally:
            if conn is not None:
                await conn.close()  # ends the session: its advisory lock goes with it

    async def _slot(self, graph: str, max_running: int) -> Any:
        import psycopg

        key = zlib.crc32(graph.encode()) & 0x7FFFFFFF
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, **self._kwargs)
        pause = 0.01
        try:
            while True:
                for i in range(max_running):
                    cur = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (_SLOT_LOCK + i, key))
                    row = await cur.fetchone()
                    if row is not None and row[0]:
                        return conn
                await asyncio.sleep(pause)
                pause = min(pause * 2, _MAX_PAUSE)
        except BaseException:
            await conn.close()
            raise

    async def _token(self, graph: str) -> None:
        now = "extract(epoch from clock_timestamp())"
        while True:
            async with borrow(self._pool) as conn, conn.cursor() as cur:
                await cur.execute(
                    f"UPDATE plait_run_limit SET tokens = least(burst, tokens + ({now} - refilled_at) * rate) - 1, "
                    f"refilled_at = {now} WHERE graph = %s AND rate IS NOT NULL "
                    f"AND least(burst, tokens + ({now} - refilled_at) * rate) >= 1 RETURNING tokens",
                    (graph,),
                )
                if await cur.fetchone() is not None:
                    return
                await cur.execute(
                    f"SELECT (1 - least(burst, tokens + ({now} - refilled_at) * rate)) / rate FROM plait_run_limit "
                    "WHERE graph = %s",
                    (graph,),
                )
                row = await cur.fetchone()
            if row is None or row[0] is None:
                return  # the limit was lifted meanwhile
            await asyncio.sleep(min(max(float(row[0]), 0.001), _MAX_PAUSE))
