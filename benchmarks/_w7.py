"""W7 in a child process, so the peak RSS it reports belongs to one library alone.

Usage: ``python -m benchmarks._w7 --lib plait --threads 1000 --steps 20 --db PATH``; prints one
JSON object: the seconds of the concurrent run, the peak RSS and the RSS before the run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from pathlib import Path


def _peak_rss() -> int | None:
    """This process's peak RSS (VmHWM). Not ``getrusage``: on Linux its ``ru_maxrss`` survives
    exec, so a child forked from a big parent would report the parent's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _rss_now() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks._w7")
    p.add_argument("--lib", choices=["plait", "langgraph"], required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--durability", default="async")
    a = p.parse_args(argv)
    mod = importlib.import_module("benchmarks.pl" if a.lib == "plait" else "benchmarks.lg")
    mod.import_all()
    base = _rss_now()
    seconds = asyncio.run(mod.w7_run(a.db, a.threads, a.steps, a.durability))
    peak = _peak_rss()
    json.dump({"seconds": seconds, "peak_rss": peak, "base_rss": base}, sys.stdout)


if __name__ == "__main__":
    main()
