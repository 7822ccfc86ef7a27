"""The Studio's first page of threads on a store holding 10,000 of them (target: < 200 ms).

Run: ``python -m benchmarks.studio_speed`` (SQLite), with ``--postgres DSN`` for PostgreSQL
too (a scratch schema is created and dropped), ``--threads N`` for another size. Each figure
is the median (and the slowest) of ``--repeat`` requests made through the ASGI app in this
process (TestClient: routing, the security middleware, the store read, JSON or HTML), after
one warm-up request. The threads are written in batches through the public
``Checkpointer.acommit``, each a small finished thread, one in ten waiting on an interrupt.
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

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, PendingWrite, Task, WritesBatch

BATCH = 500
REQUESTS = (
    ("JSON, first 50 threads", "/api/threads?limit=50"),
    ("JSON, interrupted only", "/api/threads?limit=50&status=interrupted"),
    ("JSON, id prefix t-00", "/api/threads?limit=50&q=t-00"),
    ("HTML thread list page", "/"),
    ("JSON, one thread's summary", "/api/threads/t-05000"),
    ("JSON, metadata source=input (reads each head)", '/api/threads?limit=50&metadata={"source":"input"}'),
    ("JSON, metadata matching no thread (reads all 10,000 heads)", '/api/threads?limit=50&metadata={"source":"x"}'),
)


async def fill(
    saver: Checkpointer,
    n: int,
    *,
    waiting_every: int = 10,
    metadata: Callable[[int], dict[str, Any]] | None = None,
) -> None:
    """``n`` small finished threads ``t-00000``..., written in batches through ``acommit``:
    one in ``waiting_every`` paused on an interrupt, each head's metadata the input's plus
    ``metadata(i)`` (the search benchmark's users and tags)."""
    await saver.asetup()
    for start in range(0, n, BATCH):
        cps, writes = [], []
        for i in range(start, min(n, start + BATCH)):
            tid = f"t-{i:05d}"
            waiting = i % waiting_every == 0
            cid = f"{int(time.time() * 1e6) << 12 | i:016x}aaaaaa"
            cp = Checkpoint(
                thread_id=tid,
                id=cid,
                parent_id=None,
                step=1,
                values={"topic": f"topic {i}", "notes": [f"note {i}"]},
                versions={"topic": 1, "notes": 1},
                next_tasks=(Task(id=f"task{i}", node="ask"),) if waiting else (),
                metadata={
                    "source": "input",
                    "step": 1,
                    "writes": {"input": ["notes", "topic"]},
                    **(metadata(i) if metadata is not None else {}),
                },
                created_at=time.time(),
            )
            cps.append(CheckpointWrite(checkpoint=cp, changed=frozenset(cp.values)))
            if waiting:
                value = {"id": f"i{i}", "value": {"ask": "ok?"}, "node": "ask", "task_id": f"task{i}", "index": 0}
                writes.append(
                    WritesBatch(
                        thread_id=tid,
                        checkpoint_id=cid,
                        writes=(PendingWrite(task_id=f"task{i}", kind="interrupt", value=value),),
                    )
                )
        await saver.acommit(checkpoints=cps, writes=writes)


def measure(saver: Checkpointer, repeat: int) -> list[tuple[str, float, float]]:
    from fastapi.testclient import TestClient

    from plait.server import create_app

    out = []
    with TestClient(create_app(saver)) as client:
        client.headers["host"] = "127.0.0.1"
        for label, path in REQUESTS:
            assert client.get(path).status_code == 200, path
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                r = client.get(path)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200
            out.append((label, statistics.median(times), max(times)))
    return out


def run(name: str, make: Callable[[], Checkpointer], n: int, repeat: int) -> None:
    saver = make()
    t0 = time.perf_counter()
    asyncio.run(fill(saver, n))
    print(f"\n{name}: {n:,} threads written in {time.perf_counter() - t0:.1f}s")
    print(f"| {name} ({n:,} threads) | median ms | slowest ms |")
    print("|---|---:|---:|")
    for label, median, worst in measure(saver, repeat):
        flag = "" if median < 200 else "  (over the 200 ms target)"
        print(f"| {label} | {median:.1f} | {worst:.1f} |{flag}")
    saver.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studio_speed")
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", metavar="DSN", default=os.environ.get("PLAIT_BENCH_POSTGRES_DSN"))
    args = parser.parse_args(argv)
    from plait.checkpoint.sqlite import SqliteCheckpointer

    folder = tempfile.mkdtemp(prefix="plait-studio-bench-")
    run("SQLite", lambda: SqliteCheckpointer(os.path.join(folder, "s.db")), args.threads, args.repeat)
    if args.postgres:
        import psycopg

        from plait.checkpoint.postgres import PostgresCheckpointer

        schema = f"bench_studio_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'create schema "{schema}"')
        try:
            run("PostgreSQL", lambda: PostgresCheckpointer(args.postgres, schema=schema), args.threads, args.repeat)
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'drop schema "{schema}" cascade')


if __name__ == "__main__":
    main()
