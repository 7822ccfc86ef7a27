"""``python -m benchmarks``: run the side-by-side workloads and report them.

Examples:
    python -m benchmarks --quick                      # every workload, tiny sizes
    python -m benchmarks --full --only W1,W3 --backends sqlite,postgres
    python -m benchmarks --full --only W8,W9,W10      # plait alone: search, CLI start, workers
    python -m benchmarks --full --docs                # also refresh docs/benchmarks.md and the plot
    python -m benchmarks --from benchmarks/results/X.jsonl --docs   # re-render a saved run

Postgres cases run when PLAIT_BENCH_POSTGRES_DSN is set (each library gets its own scratch
database, created and dropped by the harness).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

from benchmarks._common import ALL_BACKENDS, FULL, PG_ENV, QUICK, Env, environment, make_workdir
from benchmarks._plait_rows import PLAIT_ONLY
from benchmarks._profile import AllThreads
from benchmarks._report import (
    LG,
    PLAIT,
    plot_storage,
    print_table,
    rows_from_json_lines,
    to_json_lines,
    update_docs,
    verdict_summary,
)
from benchmarks._workloads import WORKLOADS as SIDE_BY_SIDE
from benchmarks._workloads import Ctx, floor, floor_rows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
DOC = ROOT / "docs" / "benchmarks.md"
PNG = ROOT / "docs" / "img" / "storage.png"
WORKLOADS = {**SIDE_BY_SIDE, **PLAIT_ONLY}
"""W1 to W7 on both libraries, then W8 to W10 on plait alone (search, command-line start, workers)."""


def _libs(wanted: list[str]) -> tuple[list[ModuleType], list[str]]:
    libs, notes = [], []
    for name, mod in ((PLAIT, "benchmarks.pl"), (LG, "benchmarks.lg")):
        if name not in wanted:
            continue
        m = importlib.import_module(mod)
        if m.available():
            m.import_all()
            libs.append(m)
        else:
            notes.append(f"{name} is not importable: its side is skipped (pip install 'plait[bench]')")
    return libs, notes


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0] if __doc__ else "")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (the default)")
    size.add_argument("--full", action="store_true", help="the sizes the docs report")
    p.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W3 (default: all)")
    p.add_argument("--backends", default=",".join(ALL_BACKENDS), help="comma-separated: none,memory,sqlite,postgres")
    p.add_argument("--libs", default=f"{PLAIT},{LG}", help="comma-separated: plait,langgraph")
    p.add_argument("--out", type=Path, help="JSON lines file (default: benchmarks/results/<timestamp>.jsonl)")
    p.add_argument("--docs", action="store_true", help="refresh the table in docs/benchmarks.md and the plot")
    p.add_argument("--from", dest="from_file", type=Path, help="render a saved JSON lines file instead of running")
    p.add_argument("--plain", action="store_true", help="plain text table even when rich is installed")
    p.add_argument("--workdir", help="parent folder for scratch databases (must not be tmpfs)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run plait's side only, under cProfile in every thread; print the hotspots and save a .pstats file",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _parse(argv)
    if a.from_file:
        rows, meta = rows_from_json_lines(a.from_file)
        libs = sorted({lib for r in rows for lib in r.samples if lib != "harness"})
        table = [r for r in rows if r.workload != "floor"]
        _print_floors([r for r in rows if r.workload == "floor"])
        print_table(table, libs, plain=a.plain)
        print(f"\n{verdict_summary(table)}")
        if a.docs:
            _docs(rows, libs, meta)
        return 0

    sizes = FULL if a.full else QUICK
    mode = "full" if a.full else "quick"
    only = [w.strip().upper() for w in a.only.split(",") if w.strip()] or list(WORKLOADS)
    unknown = [w for w in only if w not in WORKLOADS]
    if unknown:
        print(f"unknown workloads {unknown}; known: {list(WORKLOADS)}", file=sys.stderr)
        return 2
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    pg = os.environ.get(PG_ENV) or None
    notes = []
    if "postgres" in backends and not pg:
        backends.remove("postgres")
        notes.append(f"{PG_ENV} is not set: the Postgres cases are skipped")
    wanted = [PLAIT] if a.profile else [x.strip() for x in a.libs.split(",")]
    libs, lib_notes = _libs(wanted)
    notes += lib_notes
    if not libs:
        print("nothing to run: neither library is importable", file=sys.stderr)
        return 2
    for n in notes:
        print(f"note: {n}", file=sys.stderr)

    started = dt.datetime.now(dt.UTC)
    run_id = started.strftime("%Y%m%dT%H%M%SZ")
    env = Env(workdir=make_workdir(a.workdir), pg_dsn=pg, sizes=sizes)
    ctx = Ctx(env=env, libs=libs, backends=backends)
    meta = {"run_id": run_id, "started": started.isoformat(timespec="seconds"), "mode": mode}
    ctx.log(f"run {run_id} ({mode}), libraries {[m.NAME for m in libs]}, backends {backends}, scratch {env.workdir}")
    profiler = AllThreads() if a.profile else None
    try:
        floor(ctx)
        with profiler.running() if profiler else contextlib.nullcontext():
            for w in only:
                WORKLOADS[w](ctx)
        floor_rows(ctx)
    finally:
        env.close()
        if not a.keep:
            shutil.rmtree(env.workdir, ignore_errors=True)
    meta["env"] = environment(pg)
    meta["env"]["notes"] = notes

    out = a.out or RESULTS / f"{run_id}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(to_json_lines(ctx.rows, meta)) + "\n")

    names = [m.NAME for m in libs]
    _print_floors([r for r in ctx.rows if r.workload == "floor"])
    measured = [r for r in ctx.rows if r.workload != "floor"]
    print_table(measured, names, plain=a.plain)
    print(f"\n{verdict_summary(measured)}")
    print(f"JSON lines: {out}")
    if LG in names:
        print("speedup = LangGraph median / plait median (throughput: plait / LangGraph); > 1 means plait is faster.")
    if profiler is not None:
        pst = out.with_suffix(".pstats")
        print("\n" + profiler.report(pst))
        print(f"profile: {pst} (open with python -m pstats, snakeviz, ...)")
    if a.docs and profiler is None:
        _docs(ctx.rows, names, meta)
    return 0


def _print_floors(rows: list) -> None:  # type: ignore[type-arg]
    for r in rows:
        s = r.samples.get("harness", [])
        if s:
            print(f"floor  {r.case}: median {r.median('harness'):.0f} us (min {min(s):.0f}, max {max(s):.0f})")
    if rows:
        print()


def _docs(rows: list, libs: list[str], meta: dict) -> None:  # type: ignore[type-arg]
    update_docs(DOC, rows, libs, meta)
    if plot_storage(rows, PNG):
        print(f"plot: {PNG}")
    print(f"docs: {DOC}")


if __name__ == "__main__":
    sys.exit(main())
