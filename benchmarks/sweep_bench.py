"""The retention sweep on a store that grew for months: 10,000 threads x 50 steps.

Run: ``python -m benchmarks.sweep_bench`` (SQLite), ``--postgres DSN`` for PostgreSQL too (a
scratch schema is created and dropped); ``--threads N --steps S`` for other sizes. The store
is filled through ``Checkpointer.acommit`` one step of every thread per transaction (each
thread a chain of checkpoints whose ``notes`` list grows by one note a step, as a chat's
messages do); then ``sweep`` applies ``Retention(after=1 day, action="keep_latest")`` judged a
week later (``at=``), and the figures are the sweep's wall time, threads per second, and the
store's bytes before and after (SQLite: the file after its space is reclaimed; PostgreSQL:
``pg_total_relation_size`` of the schema's tables, before and after ``VACUUM FULL``, since a
plain delete leaves dead rows for autovacuum).

Targets (issue "Data lifecycle"): ``keep_latest`` removes >= 95 % of the bytes and sweeps
>= 2,000 threads/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite
from plait.checkpoint.retention import Retention

DAY = 86_400.0


async def fill(saver: Checkpointer, threads: int, steps: int) -> None:
    """``threads`` chains of ``steps`` checkpoints, one step of every thread per commit."""
    await saver.asetup()
    parents: list[str | None] = [None] * threads
    base = int(time.time() * 1e6) << 12
    for step in range(steps):
        batch = []
        for i in range(threads):
            cid = f"{base + step * threads + i:016x}{i:06x}"
            notes = [f"note {k} of thread {i}: a line a model might have answered" for k in range(step + 1)]
            cp = Checkpoint(
                thread_id=f"t-{i:05d}",
                id=cid,
                parent_id=parents[i],
                step=step,
                values={"topic": f"topic {i}", "notes": notes},
                versions={"topic": 1, "notes": step + 1},
                metadata={"source": "loop" if step else "input", "step": step},
                created_at=time.time(),
            )
            batch.append(CheckpointWrite(checkpoint=cp, changed=frozenset({"notes"} if step else {"topic", "notes"})))
            parents[i] = cid
        await saver.acommit(checkpoints=batch)


def run(
    name: str, make: Callable[[], Checkpointer], size: Callable[[Checkpointer], int], args: argparse.Namespace
) -> None:
    saver = make()
    t0 = time.perf_counter()
    asyncio.run(fill(saver, args.threads, args.steps))
    filled = time.perf_counter() - t0
    saver.reclaim_space()
    before = size(saver)
    saver.set_retention(Retention(after=DAY, action="keep_latest"))
    t0 = time.perf_counter()
    report = saver.sweep(at=saver.store_time() + 7 * DAY)
    swept = time.perf_counter() - t0
    after = size(saver)
    kept = len(saver.list_threads())
    saver.close()
    print(f"\n{name}: {args.threads:,} threads x {args.steps} steps written in {filled:.1f} s")
    print(f"| {name} | value |\n|---|---:|")
    print(f"| sweep (keep_latest) | {swept:.2f} s, {args.threads / swept:,.0f} threads/s |")
    print(f"| threads reduced / kept | {len(report.reduced):,} / {kept:,} |")
    print(f"| checkpoints removed | {report.checkpoints_removed:,} |")
    print(f"| bytes before -> after | {before:,} -> {after:,} ({100 * (before - after) / before:.1f} % removed) |")


def _pg_size(dsn: str, schema: str) -> Callable[[Checkpointer], int]:
    import psycopg

    def size(_: Checkpointer) -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE schemaname = %s",
                (schema,),
            ).fetchall()
            for (table,) in tables:
                conn.execute(f"VACUUM FULL {table}")  # what the bytes would be once the dead rows are gone
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            ).fetchone()
            return int(row[0]) if row else 0

    return size


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.sweep_bench", description=__doc__.splitlines()[0] if __doc__ else ""
    )
    p.add_argument("--threads", type=int, default=10_000)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--postgres", metavar="DSN", default=os.environ.get("PLAIT_BENCH_POSTGRES_DSN"))
    p.add_argument("--no-sqlite", action="store_true")
    args = p.parse_args(argv)
    from plait.checkpoint.postgres import PostgresCheckpointer
    from plait.checkpoint.sqlite import SqliteCheckpointer

    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_sqlite:
            path = Path(tmp) / "sweep.db"
            run("SQLite", lambda: SqliteCheckpointer(path), lambda s: s.disk_bytes() or 0, args)
    if args.postgres:
        import psycopg

        schema = f"bench_sweep_{uuid.uuid4().hex[:8]}"
        try:
            run(
                "PostgreSQL",
                lambda: PostgresCheckpointer(args.postgres, schema=schema),
                _pg_size(args.postgres, schema),
                args,
            )
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
