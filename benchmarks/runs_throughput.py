"""Runs and workers on one PostgreSQL: throughput, latency, recovery, I/O-bound efficiency.

    python -m benchmarks.runs_throughput [--dsn DSN] [--runs N] [--quick]

Needs the ``runs`` extra and a PostgreSQL server (default ``$PLAIT_BENCH_POSTGRES_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``); works in a scratch Postgres schema it drops at
the end. Workers are real ``plait worker`` processes. What it measures:

1. runs per second of a one-node graph with 1, 2 and 4 workers (concurrency 10 each): the runs
   are queued first, then the workers started; the rate is runs over the time from the first
   run's start to the last one's end, read from the run table;
2. submit to first node start (p50, p99) with one idle worker, runs submitted one at a time;
3. recovery after SIGKILL: a worker running a run is killed mid-step; the time until the next
   step starts on the other worker, with short settings and with the defaults;
4. I/O-bound efficiency: 4 workers x concurrency 10, a node that sleeps 1 s: runs/s against
   the ideal 40/s.

CPU use (from /proc) is printed with each throughput figure, to name the bound: the worker
processes' and that of the PostgreSQL backends serving their connections, a run's worth of
each, and the cores busy in the workers and in all of PostgreSQL (other sessions included).
The queue's table is analysed once the runs are queued, as autovacuum keeps it on a live
database (the TRUNCATE between cases drops its statistics). It is a tool, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import _runs_flows as flows
from plait import PostgresCheckpointer
from plait.runs import Runs

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: set[int] | None = None, comm: str | None = None) -> float:
    """CPU seconds used so far by the given processes, or by every process named ``comm``."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        if (pids is not None and pid in pids) or (comm is not None and name == comm):
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def backends_of(dsn: str, pids: set[int]) -> set[int]:
    """The PostgreSQL backend pids serving the TCP connections the given processes hold now
    (their local ports, matched against ``pg_stat_activity.client_port``), so that the
    server CPU of the workers can be told from that of other sessions on the same server."""
    inodes: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports: list[int] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", (ports,)).fetchall()
    return {int(r[0]) for r in rows}


def cpu_by_pid(comm: str) -> dict[int, float]:
    """CPU seconds used so far by each process named ``comm``."""
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{entry}/stat").read_text()
                if raw[raw.index("(") + 1 : raw.rindex(")")] == comm:
                    fields = raw[raw.rindex(")") + 2 :].split()
                    found[int(entry)] = (int(fields[11]) + int(fields[12])) / TICK
    return found


class Bench:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.schema = "plait_bench_" + uuid.uuid4().hex[:8]
        self.folder = Path(tempfile.mkdtemp(prefix="plait-runs-bench-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        runs = Runs(dsn, schema=self.schema)
        runs.migrate()
        runs.close()
        store = PostgresCheckpointer(dsn, schema=self.schema)
        store.setup()
        store.close()

    def runs(self) -> Runs:
        return Runs(self.dsn, schema=self.schema, max_connections=8)

    def reset(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True, options=f"-c search_path={self.schema}") as conn:
            conn.execute("TRUNCATE plait_run, plait_run_event, plait_run_limit CASCADE")
            conn.execute("TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers CASCADE")
            conn.execute("TRUNCATE plait_checkpoints, plait_writes, plait_threads, plait_blobs")

    def analyze(self) -> None:
        """Give the queue's table statistics, as autovacuum keeps them on a live database
        (``reset``'s TRUNCATE drops them; without them the planner's fetch checks every
        waiting job: see docs/benchmarks.md)."""
        with psycopg.connect(self.dsn, autocommit=True, options=f"-c search_path={self.schema}") as conn:
            conn.execute("ANALYZE procrastinate_jobs")

    def worker(self, graphs: list[str], *options: str) -> subprocess.Popen[bytes]:
        log = self.folder / f"worker-{len(self.procs)}.log"
        command = [sys.executable, "-m", "plait", "worker", "--db", self.dsn, "--schema", self.schema]
        for g in graphs:
            command += ["--graph", flows.name(g)]
        with log.open("ab") as out:
            proc = subprocess.Popen([*command, *options], stdout=out, stderr=subprocess.STDOUT)
        proc.log = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def ready(self, *procs: subprocess.Popen[bytes]) -> None:
        for proc in procs:
            log: Path = proc.log  # type: ignore[attr-defined]
            deadline = time.monotonic() + 60
            while " started on " not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start: {log.read_text()}")
                time.sleep(0.02)

    def stop(self, *procs: subprocess.Popen[bytes]) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        self.stop(*self.procs)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')


def throughput(
    bench: Bench, workers: int, n: int, graph: str = "one", concurrency: int = 10, analyze: bool = True
) -> dict[str, Any]:
    bench.reset()
    with bench.runs() as runs:
        t0 = time.perf_counter()
        ids = [runs.submit(flows.name(graph), {}, thread_id=f"t{i}") for i in range(n)]
        submit_rate = n / (time.perf_counter() - t0)
        if analyze:
            bench.analyze()
        procs = [bench.worker([graph], "--concurrency", str(concurrency)) for _ in range(workers)]
        bench.ready(*procs)
        pids = {p.pid for p in procs}
        load = os.getloadavg()[0]
        pg_before = cpu_by_pid("postgres")
        cpu_w, cpu_pg, wall = cpu_seconds(pids=pids), sum(pg_before.values()), time.monotonic()
        last = runs.join(ids[-1], timeout=600)
        while True:
            pending = runs.list(status="pending", limit=1) + runs.list(status="running", limit=1)
            if not pending:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - wall
        pg_after = cpu_by_pid("postgres")
        used_w, used_pg = cpu_seconds(pids=pids) - cpu_w, sum(pg_after.values()) - cpu_pg
        own = backends_of(bench.dsn, pids)
        used_own = sum(pg_after.get(p, 0.0) - pg_before.get(p, 0.0) for p in own)
        load = max(load, os.getloadavg()[0])
        done = runs.list(limit=None)
    bench.stop(*procs)
    assert last.status == "success" and all(r.status == "success" for r in done), "a run failed"
    first = min(r.started_at or 0 for r in done)
    end = max(r.finished_at or 0 for r in done)
    return {
        "workers": workers,
        "runs": n,
        "runs_per_s": n / (end - first),
        "submits_per_s": submit_rate,
        "worker_cores": used_w / elapsed,
        "postgres_cores": used_pg / elapsed,
        "worker_ms_per_run": 1000 * used_w / n,
        "backend_ms_per_run": 1000 * used_own / n,
        "load": load,
    }


def latency(bench: Bench, n: int) -> dict[str, float]:
    bench.reset()
    proc = bench.worker(["stamp"], "--concurrency", "10")
    bench.ready(proc)
    lat: list[float] = []
    with bench.runs() as runs:
        for i in range(5):  # warm up the worker's connections
            runs.join(runs.submit(flows.name("stamp"), {}, thread_id=f"w{i}"), timeout=30)
        for i in range(n):
            t = time.time()
            run = runs.join(runs.submit(flows.name("stamp"), {}, thread_id=f"l{i}"), timeout=30)
            lat.append(run.output["stamps"][0] - t)
    bench.stop(proc)
    lat.sort()
    return {"p50_ms": 1000 * statistics.median(lat), "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))]}


def recovery(bench: Bench, short: bool) -> float:
    bench.reset()
    opts = ["--heartbeat", "0.5", "--stalled-after", "2", "--sweep-every", "1", "--lease-ttl", "3"] if short else []
    a = bench.worker(["steps"], *opts)
    bench.ready(a)
    with bench.runs() as runs:
        run_id = runs.submit(flows.name("steps"), {"steps": 400, "pause": 0.1}, thread_id="rec")
        while (runs.get(run_id).worker or "") == "":
            time.sleep(0.01)
        b = bench.worker(["steps"], *opts)
        bench.ready(b)
        time.sleep(0.35)  # a few steps into the run, mid-step
        killed = time.time()
        a.kill()
        a.wait()
        store_head = None
        while True:
            run = runs.get(run_id)
            if run.attempts >= 2:
                with psycopg.connect(bench.dsn, options=f"-c search_path={bench.schema}") as conn:
                    store_head = conn.execute(
                        "SELECT count(*) FROM plait_checkpoints WHERE thread_id = 'rec' AND created_at > %s",
                        (killed,),
                    ).fetchone()
                if store_head and store_head[0] > 0:
                    break
            time.sleep(0.02)
        with psycopg.connect(bench.dsn, options=f"-c search_path={bench.schema}") as conn:
            row = conn.execute(
                "SELECT min(created_at) FROM plait_checkpoints WHERE thread_id = 'rec' AND created_at > %s", (killed,)
            ).fetchone()
        runs.cancel(run_id)
    bench.stop(b)
    assert row is not None
    return float(row[0]) - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("PLAIT_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="small sizes, short recovery only")
    args = parser.parse_args()
    n = 200 if args.quick else args.runs
    bench = Bench(args.dsn)
    try:
        print(f"{os.cpu_count()} cores; Postgres at {args.dsn.split('@')[-1]}; {n} runs per throughput case")
        for w in (1, 2, 4):
            r = throughput(bench, w, n)
            print(
                f"one-node runs, {w} worker(s) x concurrency 10: {r['runs_per_s']:.0f} runs/s "
                f"(submits {r['submits_per_s']:.0f}/s; CPU a run: workers {r['worker_ms_per_run']:.2f} ms, "
                f"their PostgreSQL backends {r['backend_ms_per_run']:.2f} ms; cores busy: workers "
                f"{r['worker_cores']:.2f}, all of PostgreSQL {r['postgres_cores']:.2f}; load {r['load']:.1f})"
            )
        lat = latency(bench, 50 if args.quick else 300)
        print(f"submit -> first node start: p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms")
        print(f"SIGKILL recovery, short settings: {recovery(bench, True):.2f} s until the next checkpoint")
        if not args.quick:
            print(f"SIGKILL recovery, default settings: {recovery(bench, False):.2f} s until the next checkpoint")
        io = throughput(bench, 4, 200 if args.quick else 400, graph="sleepy")
        print(
            f"I/O-bound (1 s node), 4 workers x concurrency 10: {io['runs_per_s']:.1f} runs/s = "
            f"{100 * io['runs_per_s'] / 40:.0f} % of the ideal 40/s"
        )
    finally:
        bench.close()


if __name__ == "__main__":
    main()
