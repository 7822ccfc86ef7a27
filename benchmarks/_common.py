"""Shared pieces of the benchmark harness: sizes, timing, scratch stores and the commit floor."""

from __future__ import annotations

import contextlib
import os
import platform
import random
import sqlite3
import statistics
import string
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

PG_ENV = "PLAIT_BENCH_POSTGRES_DSN"

Backend = str  # "none" | "memory" | "sqlite" | "postgres"
ALL_BACKENDS: tuple[Backend, ...] = ("none", "memory", "sqlite", "postgres")


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """How big each workload is and how often it repeats."""

    w1_steps: int
    """Steps of the counter loop (W1)."""
    w1_reps: int
    w2_workers: int
    """Parallel workers of the fan-out (W2)."""
    w2_runs: int
    """Runs of the fan-out graph, each on a new thread (W2)."""
    w3_steps: tuple[int, ...]
    """Thread lengths whose storage is measured (W3); W4 reads the longest."""
    w4_reps: int
    w5_reps: int
    w6_updates: int
    w6_reps: int
    w7_threads: int
    w7_steps: int
    w7_reps: int
    w8_threads: int
    """Threads in the store the searches run over (W8)."""
    w8_repeat: int
    w9_repeat: int
    """Fresh interpreters started for each start-up case (W9)."""
    w10_runs: int
    """One-node runs queued for one worker (W10)."""
    w10_reps: int
    floor_reps: int


QUICK = Sizes(
    w1_steps=100,
    w1_reps=2,
    w2_workers=100,
    w2_runs=3,
    w3_steps=(20, 50, 100),
    w4_reps=2,
    w5_reps=3,
    w6_updates=20,
    w6_reps=2,
    w7_threads=50,
    w7_steps=20,
    w7_reps=1,
    w8_threads=2000,
    w8_repeat=5,
    w9_repeat=3,
    w10_runs=100,
    w10_reps=1,
    floor_reps=30,
)
FULL = Sizes(
    w1_steps=1000,
    w1_reps=5,
    w2_workers=100,
    w2_runs=20,
    w3_steps=(100, 250, 500),
    w4_reps=5,
    w5_reps=10,
    w6_updates=100,
    w6_reps=3,
    w7_threads=1000,
    w7_steps=20,
    w7_reps=1,
    w8_threads=10_000,
    w8_repeat=20,
    w9_repeat=15,
    w10_runs=300,
    w10_reps=3,
    floor_reps=200,
)


@dataclass(kw_only=True)
class Env:
    """Where scratch files and databases go for one harness run."""

    workdir: Path
    pg_dsn: str | None
    sizes: Sizes
    _shared_pg: dict[str, str] = field(default_factory=dict)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def sqlite_path(self, tag: str) -> Path:
        """A fresh SQLite file path in the scratch folder."""
        return self.workdir / f"{tag}-{uuid.uuid4().hex[:8]}.db"

    def pg_db(self, lib: str) -> str:
        """The DSN of a database that holds one library's tables for the whole harness run."""
        if lib not in self._shared_pg:
            self._shared_pg[lib] = self._stack.enter_context(self.fresh_pg(lib))
        return self._shared_pg[lib]

    def close(self) -> None:
        """Drop the shared databases."""
        self._stack.close()
        self._shared_pg.clear()

    @contextlib.contextmanager
    def fresh_pg(self, tag: str) -> Iterator[str]:
        """Create a new database for one library's tables; yield its DSN; drop it after."""
        if self.pg_dsn is None:
            raise RuntimeError(f"{PG_ENV} is not set")
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        name = f"plait_bench_{tag}_{uuid.uuid4().hex[:8]}".lower()
        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        params = conninfo_to_dict(self.pg_dsn)
        params["dbname"] = name
        try:
            yield make_conninfo(**params)
        finally:
            with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_schema(dsn: str, tag: str) -> Iterator[str]:
    """A PostgreSQL schema of its own for plait's side (named after ``tag``), dropped afterwards."""
    import psycopg

    schema = f"plait_{tag}_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pg_total_bytes(dsn: str) -> int:
    """Sum of pg_total_relation_size over every table of the public schema of ``dsn``."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(format('%I.%I', schemaname, tablename)::regclass)), 0)"
            " FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def sqlite_file_bytes(path: Path) -> int:
    """Size of a closed SQLite database after its WAL is checkpointed into the main file."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    total = 0
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists() and suffix != "-shm":
            total += p.stat().st_size
    return total


def random_messages(n: int, size: int = 1024, seed: int = 7) -> list[str]:
    """``n`` texts of ``size`` random letters and spaces: compressible by no one's codec much."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + " "
    return ["".join(rng.choices(alphabet, k=size)) for _ in range(n)]


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """Run ``fn`` once; return (seconds, result)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def summary(samples: list[float]) -> dict[str, float]:
    """Median, min and max of a list of samples."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def new_thread() -> str:
    """A thread id no earlier run used."""
    return uuid.uuid4().hex


# --------------------------------------------------------------------------- the commit floor


def sqlite_commit_floor(workdir: Path, reps: int, *, room: bool = False) -> list[float]:
    """Seconds per fsync'd SQLite commit of one small row (WAL, synchronous=FULL).

    ``room``: the log file first gets 4 MB of zeros after its end, as plait's SQLite store
    keeps (``plait.checkpoint.sqlite._wal``), so the commits overwrite blocks the file has
    instead of growing it: the floor for a commit that does the same. Without it, the floor
    of a plain SQLite commit, whose log grows until its first checkpoint.
    """
    path = workdir / f"floor-{uuid.uuid4().hex[:8]}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    if room:  # nobody else has the file open: zeros after the log's end are safe to write
        wal = f"{path}-wal"
        fd = os.open(wal, os.O_WRONLY)
        try:
            os.pwrite(fd, bytes(4 << 20), os.fstat(fd).st_size)
            os.fsync(fd)
        finally:
            os.close(fd)
    payload = os.urandom(200)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (payload,))
        conn.execute("COMMIT")
        samples.append(time.perf_counter() - t0)
    conn.close()
    return samples


def pg_commit_floor(dsn: str, reps: int) -> list[float]:
    """Seconds per Postgres commit of one small row (one round trip, synchronous_commit as set).

    The table is a plain one, dropped afterwards: a TEMP table is not WAL-logged, so its
    commits never wait for a WAL flush and would understate the floor (about 120 us against
    280 us for a logged table on this machine).
    """
    import psycopg

    samples = []
    table = f"plait_bench_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id serial PRIMARY KEY, v bytea)")
        try:
            payload = os.urandom(200)
            for _ in range(reps):
                t0 = time.perf_counter()
                conn.execute(f"INSERT INTO {table} (v) VALUES (%s)", (payload,))
                samples.append(time.perf_counter() - t0)
        finally:
            conn.execute(f"DROP TABLE {table}")
    return samples


# --------------------------------------------------------------------------- environment facts


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment(pg_dsn: str | None) -> dict[str, Any]:
    """Versions of everything that can move the numbers, and the machine."""
    dists = [
        "plait",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "langchain-core",
        "orjson",
        "ormsgpack",
        "psycopg",
        "psycopg-pool",
        "aiosqlite",
    ]
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "packages": {d: _version(d) for d in dists},
        "postgres_server": None,
    }
    with contextlib.suppress(Exception):
        import psutil

        env["cpu_count_physical"] = psutil.cpu_count(logical=False)
        env["memory_total_bytes"] = psutil.virtual_memory().total
    if pg_dsn:
        with contextlib.suppress(Exception):
            import psycopg

            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                row = conn.execute("SHOW server_version").fetchone()
                sc = conn.execute("SHOW synchronous_commit").fetchone()
                fs = conn.execute("SHOW fsync").fetchone()
            env["postgres_server"] = row[0] if row else None
            env["postgres_synchronous_commit"] = sc[0] if sc else None
            env["postgres_fsync"] = fs[0] if fs else None
    return env


def make_workdir(base: str | None) -> Path:
    """A scratch folder on a real disk (not tmpfs, or fsync would be free)."""
    return Path(tempfile.mkdtemp(prefix="plait-bench-", dir=base))
