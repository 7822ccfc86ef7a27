"""``plait serve`` against LangGraph's development server, driven by the same SDK client.

    python -m benchmarks.serve_bench [--quick] [--out FILE] [--langgraph PATH] [--postgres DSN]
                                     [--only throughput,latency,history] [--profile FILE]

Starts, side by side in one run, (a) ``plait serve`` over a SQLite file in a scratch folder
(``benchmarks/_serve_plait.py``, a process of its own) and (b) ``langgraph dev`` (in memory),
run from its own virtual environment (``--langgraph``, default ``$PLAIT_BENCH_LANGGRAPH``,
``langgraph`` on the PATH, then ``/tmp/lgdev-venv/bin/langgraph``; install it with
``python -m venv /tmp/lgdev-venv && /tmp/lgdev-venv/bin/pip install 'langgraph-cli[inmem]'``),
over the same graphs written for LangGraph (``benchmarks/_serve_lg_graphs.py``, copied
beside a ``langgraph.json`` in the scratch folder). Both listen on 127.0.0.1 only. This
process drives both with ``langgraph_sdk``'s async client, the same code for each, and
measures:

1. runs per second through ``runs.wait`` with 1, 8 and 32 requests in flight, for the
   one-node and the ten-step graph (each run on a thread created before the clock starts;
   a sample stops starting runs after ``budget`` seconds);
2. the latency from sending ``runs.stream(..., stream_mode="messages-tuple")`` of the chat
   graph (a node streaming a 20-delta answer) to its first event of any kind and to its
   first ``messages`` event, p50 and p99;
3. reads of a 200-message thread (100 turns of the chat graph): ``threads.get_state``,
   ``threads.get_history(limit=10)`` and the whole history.

The cases alternate between the two servers (the order swapped at every repetition); each
figure is the median of the repetitions. Beside each throughput figure: the CPU the server
process used per run. With ``--postgres`` (default ``$PLAIT_BENCH_POSTGRES_DSN``) plait is
measured on PostgreSQL too, once ``plait serve`` can keep its runs there (until then the
case is skipped with the reason). ``--profile FILE`` runs plait's server under cProfile (every
thread), prints its hotspots and saves the ``.pstats`` file. It is a tool, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from langgraph_sdk import get_client

from benchmarks._common import scratch_schema

HERE = Path(__file__).resolve().parent
PLAIT, LG = "plait", "langgraph"
FALLBACK_LANGGRAPH = "/tmp/lgdev-venv/bin/langgraph"
QUIET_ENV = {
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGSMITH_API_KEY": "",
}
"""No tracing, no telemetry: ``langgraph dev`` then runs offline."""


@dataclass(frozen=True, slots=True)
class Sizes:
    runs: int
    """Runs per throughput sample (at most)."""
    budget: float
    """Seconds per throughput sample and per half of the latency streams (at most)."""
    reps: int
    """Samples per throughput case (alternating servers)."""
    streams: int
    """Streams timed for the latency figures (per server)."""
    turns: int
    """Chat turns of the history thread."""
    reads: int
    """Times each read of the history thread is timed."""


QUICK = Sizes(runs=40, budget=5, reps=1, streams=30, turns=20, reads=5)
FULL = Sizes(runs=400, budget=10, reps=3, streams=200, turns=100, reads=20)


@dataclass(slots=True)
class Row:
    what: str
    unit: str
    higher_is_better: bool
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    target: str = ""

    def value(self, server: str) -> float | None:
        s = self.samples.get(server)
        return statistics.median(s) if s else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server process on a loopback port, its log in the scratch folder."""

    def __init__(self, name: str, command: list[str], cwd: Path, env: dict[str, str], port: int) -> None:
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = cwd / f"{name}-{port}.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 120) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer /ok in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def cpu(self) -> float:
        """CPU seconds used so far by the server and its children."""
        total = 0.0
        for p in [self.ps, *self.ps.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_plait(
    folder: Path,
    store: str,
    name: str = PLAIT,
    *,
    cli: bool = False,
    schema: str | None = None,
    profile: Path | None = None,
) -> Server:
    """plait's server over ``store``: ``create_app`` under uvicorn in a process of its own
    (``benchmarks._serve_plait``), or with ``cli`` the ``plait serve`` command itself."""
    port = free_port()
    if cli:
        cmd = [sys.executable, "-m", "plait", "serve", "--db", store, "--host", "127.0.0.1", "--port", str(port)]
        cmd += [arg for g in ("one", "steps", "chat") for arg in ("--graph", f"{g}=benchmarks._serve_plait:{g}")]
    else:
        cmd = [sys.executable, "-m", "benchmarks._serve_plait", store, str(port)]
        cmd += ["--schema", schema] if schema is not None else []
        cmd += ["--profile", str(profile)] if profile is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    return Server(name, cmd, folder, env, port)


def find_langgraph(given: str | None) -> str | None:
    for candidate in (given, os.environ.get("PLAIT_BENCH_LANGGRAPH"), shutil.which("langgraph"), FALLBACK_LANGGRAPH):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def start_langgraph(folder: Path, exe: str) -> Server:
    app = folder / "lg-app"
    app.mkdir()
    shutil.copy(HERE / "_serve_lg_graphs.py", app / "graphs.py")
    spec = {"dependencies": ["."], "graphs": {g: f"./graphs.py:{g}" for g in ("one", "steps", "chat")}}
    (app / "langgraph.json").write_text(json.dumps(spec))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(QUIET_ENV)
    env["PATH"] = f"{Path(exe).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [
        exe,
        "dev",
        "--no-browser",
        "--no-reload",
        "--n-jobs-per-worker",
        "10",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return Server(LG, cmd, app, env, port)


# --- the measurements: the same client code for every server ---------------------------------


async def throughput(url: str, graph: str, n: int, inflight: int, budget: float) -> tuple[float, int]:
    """Runs per second of up to ``n`` ``runs.wait`` calls, ``inflight`` at a time, each on a
    thread of its own created before the clock starts; no run is started after ``budget``
    seconds. Returns the rate and the runs done."""
    client = get_client(url=url)
    threads = [(await client.threads.create())["thread_id"] for _ in range(n)]
    expect = 1 if graph == "one" else 10
    queue = iter(threads)
    done = 0

    async def worker() -> None:
        nonlocal done
        for tid in queue:
            out = await client.runs.wait(tid, graph, input={"n": 0})
            assert isinstance(out, dict) and out.get("n") == expect, out
            done += 1
            if time.perf_counter() > deadline:
                return

    t0 = time.perf_counter()
    deadline = t0 + budget
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return done / (time.perf_counter() - t0), done


def _turn(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"question {i}"}]}


async def first_events(url: str, n: int, budget: float) -> tuple[list[float], list[float]]:
    """Milliseconds from sending a streamed chat run to its first event and to its first
    ``messages`` event, for up to ``n`` runs one after the other (each on a new thread), none
    started after ``budget`` seconds."""
    client = get_client(url=url)
    first_any: list[float] = []
    first_msg: list[float] = []
    deadline = time.perf_counter() + budget
    for i in range(n):
        if time.perf_counter() > deadline:
            break
        tid = (await client.threads.create())["thread_id"]
        t0 = time.perf_counter()
        got_any = got_msg = None
        deltas = 0
        async for part in client.runs.stream(tid, "chat", input=_turn(i), stream_mode="messages-tuple"):
            now = time.perf_counter()
            got_any = got_any or now
            if part.event == "messages":
                got_msg = got_msg or now
                deltas += 1
        assert got_any is not None and got_msg is not None and deltas >= 20, (got_any, got_msg, deltas)
        first_any.append((got_any - t0) * 1000)
        first_msg.append((got_msg - t0) * 1000)
    return first_any, first_msg


async def build_history(url: str, turns: int) -> tuple[str, str]:
    """A thread of ``turns`` chat turns; its id and the size of its whole history."""
    client = get_client(url=url)
    tid = (await client.threads.create())["thread_id"]
    for i in range(turns):  # streamed, not waited for: langgraph dev answers a wait ~1 s late
        async for _ in client.runs.stream(tid, "chat", input=_turn(i), stream_mode="values"):
            pass
    state = await client.threads.get_state(tid)
    assert len(state["values"]["messages"]) == 2 * turns, len(state["values"]["messages"])
    whole = await client.threads.get_history(tid, limit=1000)
    size = len(json.dumps(whole).encode())
    return str(tid), f"its whole history: {len(whole)} checkpoints, {size / 1e6:.2f} MB of JSON"


async def reads(url: str, tid: str, times: int) -> dict[str, list[float]]:
    client = get_client(url=url)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "get_state": lambda: client.threads.get_state(tid),
        "get_history(limit=10)": lambda: client.threads.get_history(tid, limit=10),
        "get_history(limit=1000), the whole": lambda: client.threads.get_history(tid, limit=1000),
    }
    out: dict[str, list[float]] = {}
    for name, call in calls.items():
        await call()
        samples = out[name] = []
        for _ in range(times):
            t0 = time.perf_counter()
            await call()
            samples.append((time.perf_counter() - t0) * 1000)
    return out


# --- the run -----------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class Bench:
    def __init__(self, servers: list[Server], sizes: Sizes) -> None:
        self.servers, self.sizes = servers, sizes
        self.rows: list[Row] = []

    def row(self, what: str, unit: str, higher: bool, target: str = "") -> Row:
        r = Row(what, unit, higher, target=target)
        self.rows.append(r)
        return r

    def order(self, rep: int) -> list[Server]:
        return self.servers if rep % 2 == 0 else self.servers[::-1]

    def log(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def run_throughput(self) -> None:
        for s in self.servers:  # warm-up: imports, first connections, first runs of each graph
            for graph in ("one", "steps"):
                asyncio.run(throughput(s.url, graph, 10, 2, 5))
        for graph, label in (("one", "one-node"), ("steps", "ten-step")):
            for inflight in (1, 8, 32):
                r = self.row(f"{label} runs.wait, {inflight} in flight", "runs/s", True, target=">=3x")
                cpu = self.row(f"  server CPU a run ({label}, {inflight} in flight)", "ms", False)
                for rep in range(self.sizes.reps):
                    for s in self.order(rep):
                        c0 = s.cpu()
                        rate, done = asyncio.run(throughput(s.url, graph, self.sizes.runs, inflight, self.sizes.budget))
                        per_run = 1000 * (s.cpu() - c0) / done  # thread creations included
                        r.samples.setdefault(s.name, []).append(rate)
                        cpu.samples.setdefault(s.name, []).append(per_run)
                        self.log(
                            f"{s.name}: {r.what}: {rate:.1f} runs/s ({done} runs), server CPU {per_run:.2f} ms a run"
                        )

    def run_latency(self) -> None:
        any_p50 = self.row("chat stream: first event, p50", "ms", False)
        any_p99 = self.row("chat stream: first event, p99", "ms", False)
        msg_p50 = self.row("chat stream: first messages event, p50", "ms", False, target="plait <= 10 ms")
        msg_p99 = self.row("chat stream: first messages event, p99", "ms", False)
        for s in self.servers:
            asyncio.run(first_events(s.url, 5, 30))
        half = max(1, self.sizes.streams // 2)
        per: dict[str, tuple[list[float], list[float]]] = {s.name: ([], []) for s in self.servers}
        for rep in range(2):  # two halves, the order swapped
            for s in self.order(rep):
                a, m = asyncio.run(first_events(s.url, half, 3 * self.sizes.budget))
                per[s.name][0].extend(a)
                per[s.name][1].extend(m)
                self.log(f"{s.name}: {len(m)} streams, first messages event p50 {statistics.median(m):.2f} ms")
        for name, (a, m) in per.items():
            any_p50.samples[name], any_p99.samples[name] = [pct(a, 0.5)], [pct(a, 0.99)]
            msg_p50.samples[name], msg_p99.samples[name] = [pct(m, 0.5)], [pct(m, 0.99)]

    def run_history(self) -> None:
        n = 2 * self.sizes.turns
        threads: dict[str, str] = {}
        for s in self.servers:
            t0 = time.perf_counter()
            threads[s.name], size = asyncio.run(build_history(s.url, self.sizes.turns))
            self.log(f"{s.name}: {self.sizes.turns} chat turns in {time.perf_counter() - t0:.1f} s; {size}")
        rows: dict[str, Row] = {}
        for rep in range(2):
            for s in self.order(rep):
                for name, samples in asyncio.run(reads(s.url, threads[s.name], self.sizes.reads)).items():
                    r = rows.get(name) or rows.setdefault(name, self.row(f"{n}-message thread: {name}", "ms", False))
                    r.samples.setdefault(s.name, []).extend(samples)


def verdict(r: Row) -> str:
    p, g = r.value(PLAIT), r.value(LG)
    if r.target.startswith("plait <="):
        return "" if p is None else ("PASS" if p <= float(r.target.split()[2]) else "MISS")
    if r.target.startswith(">=") and p and g:
        need = float(r.target[2:-1])
        return "PASS" if (p / g if r.higher_is_better else g / p) >= need else "MISS"
    return ""


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def table(rows: list[Row], names: list[str]) -> str:
    head = ["measure", "unit", *names, "plait / LangGraph", "plait better by", "target", "result"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        vals = [r.value(n) for n in names]
        p, g = r.value(PLAIT), r.value(LG)
        ratio = f"{p / g:.2f}" if p and g else "-"
        better = (f"{p / g:.2f}x" if r.higher_is_better else f"{g / p:.2f}x") if p and g else "-"
        cells = [r.what, r.unit, *map(fmt, vals), ratio, better, r.target, verdict(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def postgres_check(dsn: str) -> str | None:
    """Why plait cannot serve on ``dsn``, or None when it can (its runs go through the run
    queue, which needs the runs extra)."""
    try:
        import plait.runs  # noqa: F401
    except ImportError as e:
        return f"plait serve on PostgreSQL needs the runs extra ({e})"
    del dsn
    return None


def environment(lg_exe: str | None) -> dict[str, Any]:
    from importlib.metadata import version

    env: dict[str, Any] = {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "plait": version("plait"),
        "langgraph_sdk": version("langgraph-sdk"),
        "load": os.getloadavg(),
    }
    if lg_exe:
        py = Path(lg_exe).parent / "python"
        probe = (
            "from importlib.metadata import version as v; print(v('langgraph-api'), v('langgraph'), v('langgraph-cli'))"
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            api, lgv, cli = subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
            env.update({"langgraph_api": api, "langgraph": lgv, "langgraph_cli": cli})
    return env


@contextlib.contextmanager
def servers_up(folder: Path, args: argparse.Namespace, notes: list[str]) -> Iterator[list[Server]]:
    started: list[Server] = []
    with contextlib.ExitStack() as stack:
        schema = None
        if args.postgres:
            why = postgres_check(args.postgres)
            if why:
                notes.append(f"PostgreSQL skipped: {why}")
            else:
                schema = stack.enter_context(scratch_schema(args.postgres, "serve"))
        stack.callback(lambda: [s.stop() for s in started])  # before the schema is dropped
        started.append(start_plait(folder, str(folder / "serve.db"), cli=args.cli, profile=args.profile))
        if schema is not None:
            started.append(start_plait(folder, args.postgres, name="plait-postgres", schema=schema))
        if args.langgraph:
            started.append(start_langgraph(folder, args.langgraph))
        for s in started:
            s.wait_ready()
        yield started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve_bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    p.add_argument("--out", type=Path, help="JSON file of every sample (default: benchmarks/results/serve-<time>.json)")
    p.add_argument("--langgraph", help="the langgraph CLI of a venv with langgraph-cli[inmem]")
    p.add_argument("--postgres", default=os.environ.get("PLAIT_BENCH_POSTGRES_DSN"), help="also serve plait on it")
    p.add_argument("--cli", action="store_true", help="start plait's side with the plait serve command")
    p.add_argument("--profile", type=Path, help="run plait's server under cProfile; its .pstats file goes here")
    p.add_argument("--only", default="throughput,latency,history", help="comma-separated parts")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    sizes = QUICK if args.quick else FULL
    notes: list[str] = []
    exe = find_langgraph(args.langgraph)
    if exe is None:
        notes.append("langgraph dev not found (see --langgraph): plait's figures only")
    args.langgraph = exe
    args.profile = args.profile.resolve() if args.profile else None
    folder = Path(tempfile.mkdtemp(prefix="plait-serve-bench-"))
    started = dt.datetime.now(dt.UTC)
    try:
        with servers_up(folder, args, notes) as servers:
            bench = Bench(servers, sizes)
            parts = {"throughput": bench.run_throughput, "latency": bench.run_latency, "history": bench.run_history}
            for part in args.only.split(","):
                parts[part.strip()]()
        if args.profile:
            report = servers[0].log.read_text(errors="replace")
            print(report[report.find("own time by thread kind") :], file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    names = [s.name for s in servers]
    env = environment(exe)
    print(
        f"\n{env['cores']} cores, {env['platform']}, Python {env['python']}, SQLite {env['sqlite']}; "
        f"plait {env['plait']}, langgraph-api {env.get('langgraph_api', '-')}, langgraph {env.get('langgraph', '-')}, "
        f"client langgraph-sdk {env['langgraph_sdk']}; {'quick' if args.quick else 'full'} sizes {sizes}"
    )
    print(table(bench.rows, names))
    print(
        "\nplait: durable, a SQLite file (checkpoints WAL + synchronous=FULL: fsync'd per commit; its run log "
        "WAL + synchronous=NORMAL). langgraph dev: in memory (a pickle of it written now and then).\n"
        "plait / LangGraph: the plain ratio; 'plait better by': LangGraph's time over plait's, plait's rate over "
        "LangGraph's."
    )
    for n in notes:
        print(f"note: {n}")
    out = args.out or HERE / "results" / f"serve-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {"what": r.what, "unit": r.unit, "samples": r.samples, "target": r.target, "result": verdict(r)}
        for r in bench.rows
    ]
    doc = {
        "started": started.isoformat(timespec="seconds"),
        "sizes": asdict(sizes),
        "env": env,
        "notes": notes,
        "rows": rows,
    }
    out.write_text(json.dumps(doc, indent=1))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
