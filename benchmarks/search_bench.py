"""Thread search on a store holding 10,000 threads: the metadata filter and a rare status,
before (every head read into Python) and after (filtered in the store).

Run: ``python -m benchmarks.search_bench`` (SQLite), with ``--postgres DSN`` for PostgreSQL too
(a scratch schema is created and dropped), ``--threads N`` for another size,
``--after-only`` to time the store's filter alone (the old path still checks its answer). Each figure is
the median (p50) and the slowest of ``--repeat`` calls, after one warm-up call, of
:func:`plait.inspect.list_threads` (what the Studio's ``/api/threads`` and ``plait threads``
call) for a page of 50. "before" is the path plait took until the search moved into the
store, kept here as :func:`_before` (pages of 500 from ``alist_threads``, then each thread's
head read by ``ahistory(limit=1)`` and compared in Python); "after" is the store's filter.

The threads are written in batches through the public ``Checkpointer.acommit``: small
finished threads whose head metadata names one of 100 users, one in 1,000 waiting on an
interrupt (10 of 10,000: a status filter that matches few threads).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from benchmarks.studio_speed import fill as studio_fill
from plait import inspect as ins
from plait.checkpoint._match import matches
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Status, ThreadInfo

BATCH = 500
USERS = 100
RARE = 1000
"""One thread in this many waits on an interrupt."""
PAGE = 50


async def fill(saver: Checkpointer, n: int) -> None:
    """The Studio benchmark's threads (:func:`benchmarks.studio_speed.fill`), one in
    :data:`RARE` waiting, each head naming one of :data:`USERS` users and a batch tag."""
    await studio_fill(saver, n, waiting_every=RARE, metadata=_tags)


def _tags(i: int) -> dict[str, Any]:
    return {"user": f"user-{i % USERS}", "run": {"attempt": 1, "tags": ["bench", f"batch-{i // BATCH}"]}}


async def _before(
    cp: Checkpointer, *, status: Status | None = None, metadata: Mapping[str, Any] | None = None
) -> list[ThreadInfo]:
    """The search as plait ran it before the store filtered metadata: pages of 500 threads,
    each head read and compared here (by the store's rule, so both give one answer), until a
    page of 50 (and one more) is found."""
    kept: list[ThreadInfo] = []
    cursor = None
    while True:
        rows = await cp.alist_threads(status=status, limit=500, before=cursor)
        for info in rows:
            if metadata:
                head = await cp.ahistory(info.thread_id, namespace=info.namespace, limit=1)
                if not head or not matches(head[0].metadata, metadata):
                    continue
            kept.append(info)
            if len(kept) > PAGE:
                return kept[:PAGE]
        if len(rows) < 500:
            return kept
        cursor = rows[-1].cursor


def cases(cp: Checkpointer) -> list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]], int]]:
    async def after(**kw: Any) -> list[ThreadInfo]:
        return list((await ins.list_threads(cp, limit=PAGE, **kw)).threads)

    nobody: dict[str, Any] = {"user": "nobody"}
    one_user: dict[str, Any] = {"user": "user-7"}
    nested: dict[str, Any] = {"run": {"tags": ["bench", "batch-3"]}}
    return [
        ("metadata matching no thread", lambda: _before(cp, metadata=nobody), lambda: after(metadata=nobody), 0),
        (
            "metadata user=user-7 (1 in 100)",
            lambda: _before(cp, metadata=one_user),
            lambda: after(metadata=one_user),
            50,
        ),
        ("metadata nested (batch 3 of 20)", lambda: _before(cp, metadata=nested), lambda: after(metadata=nested), 50),
        (
            "status interrupted (10 threads)",
            lambda: _before(cp, status="interrupted"),
            lambda: after(status="interrupted"),
            -1,
        ),
    ]


async def samples(call: Callable[[], Awaitable[Any]], repeat: int) -> tuple[list[float], Any]:
    """One warm-up call, then ``repeat`` timed ones: the milliseconds of each, and the warm-up's answer."""
    got = await call()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, got


async def _time(call: Callable[[], Awaitable[Any]], repeat: int) -> tuple[float, float, Any]:
    times, got = await samples(call, repeat)
    times = times or [math.nan]
    return statistics.median(times), max(times), got


async def measure(
    cp: Checkpointer, repeat: int, n: int, *, before_too: bool = True
) -> list[tuple[str, float, float, float, float]]:
    out = []
    for label, before, after, expect in cases(cp):
        b50, bmax, old = await _time(before, max(3, repeat // 4) if before_too else 0)
        a50, amax, new = await _time(after, repeat)
        same = [t.thread_id for t in old] == [t.thread_id for t in new]  # (checked even when not timed)
        assert same, f"{label}: the store's answer differs from the old path's"
        assert expect < 0 or len(new) == expect, f"{label}: {len(new)} threads"
        out.append((label, b50, bmax, a50, amax))
    return out


def run(name: str, make: Callable[[], Checkpointer], n: int, repeat: int, before_too: bool) -> None:
    saver = make()
    t0 = time.perf_counter()
    asyncio.run(fill(saver, n))
    print(f"\n{name}: {n:,} threads written in {time.perf_counter() - t0:.1f} s")
    print(f"| {name} ({n:,} threads), page of {PAGE} | before p50 ms (max) | after p50 ms (max) |")
    print("|---|---:|---:|")
    for label, b50, bmax, a50, amax in asyncio.run(measure(saver, repeat, n, before_too=before_too)):
        print(f"| {label} | {b50:.1f} ({bmax:.1f}) | {a50:.2f} ({amax:.2f}) |")
    saver.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search_bench")
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", metavar="DSN", default=os.environ.get("PLAIT_BENCH_POSTGRES_DSN"))
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--after-only", action="store_true", help="time the store's filter only (before: nan)")
    args = parser.parse_args(argv)
    from plait.checkpoint.sqlite import SqliteCheckpointer

    if not args.no_sqlite:
        folder = tempfile.mkdtemp(prefix="plait-search-bench-")
        run(
            "SQLite",
            lambda: SqliteCheckpointer(os.path.join(folder, "s.db")),
            args.threads,
            args.repeat,
            not args.after_only,
        )
    if args.postgres:
        import psycopg

        from plait.checkpoint.postgres import PostgresCheckpointer

        schema = f"bench_search_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'create schema "{schema}"')
        try:
            run(
                "PostgreSQL",
                lambda: PostgresCheckpointer(args.postgres, schema=schema),
                args.threads,
                args.repeat,
                not args.after_only,
            )
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'drop schema "{schema}" cascade')


if __name__ == "__main__":
    main()
