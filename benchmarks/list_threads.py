"""``list_threads`` on a store holding 100,000 threads: paged and filtered in the store.

Run: ``python -m benchmarks.list_threads`` (SQLite), with ``--postgres DSN`` for PostgreSQL too
(a scratch schema is created and dropped); ``--threads N`` for another size. Each figure is
the median and the slowest of ``--repeat`` calls of the public ``Checkpointer.list_threads``
(sync facade, as a script calls it), after one warm-up call. The threads are written through
``Checkpointer.acommit`` in batches (see :func:`benchmarks.studio_speed.fill`): small finished
threads, one in ten waiting on an interrupt.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks.studio_speed import fill
from plait.checkpoint.base import Checkpointer


def _cases(cp: Checkpointer) -> list[tuple[str, Callable[[], Any]]]:
    first = cp.list_threads(limit=50)
    deep = first[-1].cursor
    for _ in range(40):  # the cursor of the 2,000th thread
        deep = cp.list_threads(limit=50, before=deep)[-1].cursor
    return [
        ("first page of 50", lambda: cp.list_threads(limit=50)),
        ("page 41 of 50 (by cursor)", lambda: cp.list_threads(limit=50, before=deep)),
        ("interrupted only, first 50", lambda: cp.list_threads(status="interrupted", limit=50)),
        ("error only (none stored)", lambda: cp.list_threads(status="error", limit=50)),
        ("one thread (get_thread)", lambda: cp.get_thread("t-50000")),
    ]


def measure(cp: Checkpointer, repeat: int) -> list[tuple[str, float, float]]:
    out = []
    for label, call in _cases(cp):
        call()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out.append((label, statistics.median(times) * 1e3, max(times) * 1e3))
    return out


def _report(name: str, n: int, filled: float, rows: list[tuple[str, float, float]]) -> None:
    print(f"\n{name}: {n:,} threads (written in {filled:.1f} s)")
    for label, median, worst in rows:
        print(f"  {label:<32} median {median:8.2f} ms   max {worst:8.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--postgres", metavar="DSN", default=os.environ.get("PLAIT_BENCH_POSTGRES_DSN"))
    args = ap.parse_args()
    from plait import SqliteCheckpointer

    with tempfile.TemporaryDirectory() as d:
        cp = SqliteCheckpointer(os.path.join(d, "threads.db"))
        t0 = time.perf_counter()
        asyncio.run(fill(cp, args.threads))
        filled = time.perf_counter() - t0
        _report("SQLite", args.threads, filled, measure(cp, args.repeat))
        cp.close()
    if args.postgres:
        import psycopg

        from plait import PostgresCheckpointer

        schema = f"plait_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            pg = PostgresCheckpointer(args.postgres, schema=schema)
            t0 = time.perf_counter()
            asyncio.run(fill(pg, args.threads))
            filled = time.perf_counter() - t0
            _report("PostgreSQL", args.threads, filled, measure(pg, args.repeat))
            pg.close()
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
