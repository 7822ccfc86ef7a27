"""The workloads only plait has (W8 to W10): their rows share the table and its targets, with
LangGraph's column left empty, as LangGraph has no store-side search, no command line and no
worker queue to set beside them.

Each one reuses the standalone benchmark that measures it in more depth, so that the table
and that tool cannot disagree on what is measured:

- W8, thread search in the store: ``benchmarks.search_bench``'s threads and searches;
- W9, starting the command line: ``benchmarks.cli_start``'s commands, each in a fresh
  interpreter;
- W10, runs on ``plait worker`` processes: ``benchmarks.runs_throughput``'s one-node runs and
  its CPU accounting (the workers and the PostgreSQL backends serving their connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import statistics
import subprocess
from collections.abc import Callable
from types import ModuleType
from typing import Any

from benchmarks._common import scratch_schema
from benchmarks._report import PLAIT, Row, plait_at_most
from benchmarks._workloads import Ctx, alternate


def _plait_side(ctx: Ctx, workload: str) -> Ctx | None:
    """``ctx`` with plait alone among its libraries, or None (and a note) when plait is not run."""
    libs = [m for m in ctx.libs if m.NAME == PLAIT]
    if not libs:
        ctx.log(f"{workload} measures plait alone: skipped, as plait is not among the libraries")
        return None
    return dataclasses.replace(ctx, libs=libs)


def _collect(ctx: Ctx, workload: str, backend: str, fn: Callable[[], None]) -> dict[str, str]:
    """Run ``fn`` once as plait's side; return the errors it raised, by library (for the rows)."""
    probe = Row(workload=workload, case=f"{backend} (all cases)", backend=backend, unit="")

    def one(_lib: ModuleType) -> float:
        fn()
        return 0.0

    alternate(ctx, probe, 1, one)
    ctx.rows.remove(probe)
    return dict(probe.errors)


# --------------------------------------------------------------------------- W8: search


SEARCHES = (
    # (key, the case of benchmarks.search_bench timed, target in ms)
    ("nothing", "metadata matching no thread", 50.0),
    ("status", "status interrupted (10 threads)", 20.0),
)


async def _search(saver: Any, threads: int, repeat: int, got: dict[str, list[float]]) -> None:
    from benchmarks import search_bench as sb

    await sb.fill(saver, threads)
    after = {label: call for label, _before, call, _expect in sb.cases(saver)}
    expected = {"nothing": 0, "status": min(sb.PAGE, -(-threads // sb.RARE))}
    for key, label, _target in SEARCHES:
        times, answer = await sb.samples(after[label], repeat)
        if len(answer) != expected[key]:
            raise RuntimeError(f"{label}: {len(answer)} threads found, {expected[key]} expected")
        got[key] = times


def w8(ctx: Ctx) -> None:
    """Thread search over a store of many threads: a metadata filter that matches nothing (every
    thread examined) and the first page of a status few threads have, as ``list_threads``
    (the Studio's ``/api/threads``, ``plait threads``) calls them."""
    side = _plait_side(ctx, "W8")
    if side is None:
        return
    s = ctx.env.sizes
    rare = -(-s.w8_threads // 1000)
    for backend in ctx.want("sqlite", "postgres"):
        got: dict[str, list[float]] = {}

        def one(b: str = backend, got: dict[str, list[float]] = got) -> None:
            with contextlib.ExitStack() as stack:
                if b == "sqlite":
                    from plait.checkpoint.sqlite import SqliteCheckpointer

                    saver: Any = SqliteCheckpointer(str(ctx.env.sqlite_path("w8")))
                else:
                    from plait.checkpoint.postgres import PostgresCheckpointer

                    dsn = ctx.env.pg_db(PLAIT)
                    saver = PostgresCheckpointer(dsn, schema=stack.enter_context(scratch_schema(dsn, "w8")))
                stack.callback(saver.close)
                asyncio.run(_search(saver, s.w8_threads, s.w8_repeat, got))

        errors = _collect(side, "W8", backend, one)
        cases = {
            "nothing": f"{backend} metadata matching no thread ({s.w8_threads:,} threads)",
            "status": f"{backend} status filter, first page ({rare} of {s.w8_threads:,} threads)",
        }
        for key, _label, target in SEARCHES:
            row = Row(workload="W8", case=cases[key], backend=backend, unit="ms", errors=dict(errors))
            row.target, row.check = f"plait <= {target:.0f} ms", plait_at_most(target)
            if got.get(key):
                row.samples[PLAIT] = got[key]
            ctx.rows.append(row)


# --------------------------------------------------------------------------- W9: CLI start


START_TARGETS = {"import plait": 100.0, "plait --version": 150.0, "plait threads (empty SQLite store)": 300.0}
"""Milliseconds of wall time, by ``benchmarks.cli_start`` case; its floor case has none."""


def w9(ctx: Ctx) -> None:
    """Wall time of ``import plait``, ``plait --version`` and ``plait threads`` on an empty store,
    each in a fresh interpreter; the cases take turns, so a busy moment spreads over all."""
    side = _plait_side(ctx, "W9")
    if side is None:
        return
    from benchmarks import cli_start as cs
    from plait.checkpoint.sqlite import SqliteCheckpointer

    db = str(ctx.env.sqlite_path("w9-empty"))
    SqliteCheckpointer(db).close()
    commands = {name: [a.replace("{db}", db) for a in argv] for name, argv in cs.CASES.items()}
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    failed: dict[str, str] = {}

    def attempt(name: str) -> tuple[float, float] | None:
        try:
            return cs.run_once(commands[name])
        except (OSError, subprocess.CalledProcessError) as e:
            failed[name] = f"{type(e).__name__}: {e}"
            ctx.log(f"  W9 {name} failed: {failed[name]}")
            return None

    def one() -> None:
        for name in commands:  # a warm-up run each: it writes the bytecode caches
            attempt(name)
        for _ in range(ctx.env.sizes.w9_repeat):
            for name in commands:
                got = None if name in failed else attempt(name)
                if got is not None:
                    walls.setdefault(name, []).append(got[0] * 1e3)
                    cpus.setdefault(name, []).append(got[1] * 1e3)

    errors = _collect(side, "W9", "none", one)
    for name in commands:
        row = Row(
            workload="W9",
            case=name,
            backend="sqlite" if "{db}" in cs.CASES[name] else "none",
            unit="ms wall",
            errors={PLAIT: failed[name]} if name in failed else dict(errors),
        )
        if name in START_TARGETS:
            row.target, row.check = f"plait <= {START_TARGETS[name]:.0f} ms", plait_at_most(START_TARGETS[name])
        if walls.get(name):
            row.samples[PLAIT] = walls[name]
            row.extra["cpu_ms_median"] = statistics.median(cpus[name])
        ctx.rows.append(row)


# --------------------------------------------------------------------------- W10: workers


def _url(dsn: str) -> str:
    """``dsn`` as a ``postgresql://`` URL, the form ``plait worker --db`` takes (the harness's
    scratch databases are named in ``key=value`` form)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    p = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    auth = quote(p.pop("user", ""), safe="")
    if "password" in p:
        auth += ":" + quote(p.pop("password"), safe="")
    host = p.pop("host", "")
    if host.startswith("/") or "," in host:  # a socket folder, or several hosts: a parameter
        p["host"], host = host, ""
    elif ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = f":{p.pop('port')}" if "port" in p else ""
    db = quote(p.pop("dbname", ""), safe="")
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in p.items())
    return f"postgresql://{auth + '@' if auth else ''}{host}{port}/{db}{'?' + query if query else ''}"


def w10(ctx: Ctx) -> None:
    """One-node runs queued on PostgreSQL, then run by one ``plait worker`` (concurrency 10):
    the CPU a run costs (the worker and its own PostgreSQL backends) and runs per second."""
    side = _plait_side(ctx, "W10")
    if side is None or "postgres" not in ctx.backends or not ctx.env.pg_dsn:
        return
    s = ctx.env.sizes
    results: list[dict[str, Any]] = []

    def one() -> None:
        from benchmarks import runs_throughput as rt

        bench = rt.Bench(_url(ctx.env.pg_db(PLAIT)))
        try:
            for _ in range(s.w10_reps):
                results.append(rt.throughput(bench, 1, s.w10_runs))
        finally:
            bench.close()
            shutil.rmtree(bench.folder, ignore_errors=True)

    errors = _collect(side, "W10", "postgres", one)
    label = f"1 worker x concurrency 10, {s.w10_runs} one-node runs"
    cpu = Row(
        workload="W10",
        case=f"postgres {label}: CPU a run (worker + its backends)",
        backend="postgres",
        unit="ms/run",
        target="plait <= 3 ms",
        check=plait_at_most(3.0),
        errors=dict(errors),
    )
    rate = Row(
        workload="W10",
        case=f"postgres {label}: throughput",
        backend="postgres",
        unit="runs/s",
        higher_is_better=True,
        errors=dict(errors),
    )
    if results:
        cpu.samples[PLAIT] = [r["worker_ms_per_run"] + r["backend_ms_per_run"] for r in results]
        cpu.extra.update(
            worker_ms_per_run=[r["worker_ms_per_run"] for r in results],
            backend_ms_per_run=[r["backend_ms_per_run"] for r in results],
            load=[r["load"] for r in results],
        )
        rate.samples[PLAIT] = [r["runs_per_s"] for r in results]
        rate.extra.update(worker_cores=[r["worker_cores"] for r in results])
    ctx.rows += [cpu, rate]


PLAIT_ONLY: dict[str, Callable[[Ctx], None]] = {"W8": w8, "W9": w9, "W10": w10}
