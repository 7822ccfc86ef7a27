"""Starting plait: ``import plait``, ``plait --version`` and ``plait threads`` on an empty store.

Run: ``python -m benchmarks.cli_start`` (``--repeat N``). Each case runs in a fresh interpreter
``--repeat`` times (after one warm-up run that writes the bytecode caches); the figures are the
median and slowest wall time and the median CPU time (user + system of the child), which a
busy machine inflates less than wall time. ``--importtime`` also prints the ten modules that
cost ``plait threads`` most, from ``python -X importtime``.

Targets (issue: "the CLI starts fast"): ``plait --version`` <= 150 ms and ``plait threads`` on
an empty store <= 300 ms wall, ``import plait`` <= 100 ms.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The console script beside this interpreter, as an operator runs it (not `python -m plait`,
# which runs plait/__init__ and runpy first).
_PLAIT = str(Path(sys.executable).with_name("plait"))
CASES: dict[str, list[str]] = {
    "import plait": [sys.executable, "-c", "import plait"],
    "plait --version": [_PLAIT, "--version"],
    "plait threads (empty SQLite store)": [_PLAIT, "threads", "--db", "{db}"],
    "python -c pass (the floor)": [sys.executable, "-c", "pass"],
}


# An installed package has its bytecode cached; PYTHONDONTWRITEBYTECODE (set on some CI and
# development machines) would make every run compile every changed module again.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=_ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _importtime(argv: list[str]) -> list[tuple[int, str]]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True, env=_ENV
    )
    rows = []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("  "):
            rows.append((int(parts[1]), parts[2].strip()))
    return sorted(rows, reverse=True)[:10]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cli_start", description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--importtime", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "empty.db")
        from plait import SqliteCheckpointer

        SqliteCheckpointer(db).close()
        env_note = f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
        print(f"{'case':<38} {'wall p50':>9} {'wall max':>9} {'cpu p50':>8}   ({env_note})")
        for name, template in CASES.items():
            cmd = [a.replace("{db}", db) for a in template]
            run_once(cmd)
            runs = [run_once(cmd) for _ in range(args.repeat)]
            walls = [w for w, _ in runs]
            cpus = [c for _, c in runs]
            print(
                f"{name:<38} {statistics.median(walls) * 1e3:>7.0f}ms {max(walls) * 1e3:>7.0f}ms"
                f" {statistics.median(cpus) * 1e3:>6.0f}ms"
            )
        if args.importtime:
            print("\nplait threads: the top-level imports that cost most (cumulative µs)")
            for us, module in _importtime([a.replace("{db}", db) for a in CASES["plait threads (empty SQLite store)"]]):
                print(f"  {us:>8}  {module}")


if __name__ == "__main__":
    main()
