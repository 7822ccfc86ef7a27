"""``--profile``: run plait's side of the chosen workloads under cProfile, in every thread.

plait's SQLite and Postgres checkpointers do their I/O on worker threads, which a
main-thread sampler (pyinstrument) does not see; so each thread started while profiling gets
its own ``cProfile.Profile`` (through ``threading.setprofile``) and the results are merged.
With ``PLAIT_PROFILE_CPU=1`` in the environment each thread is timed by its own CPU clock
(``time.thread_time``) instead of the wall clock, so that waiting (for a lock, a queue, the
disk) is not counted: what a server spends a request on, not what its threads wait for.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import pstats
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class AllThreads:
    """Collects one profile per thread."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, cProfile.Profile]] = []
        self._lock = threading.Lock()

    def _start_in_thread(self, *_: Any) -> None:
        sys.setprofile(None)
        p = _profile()
        with self._lock:
            self.profiles.append((threading.current_thread().name, p))
        p.enable()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        main = _profile()
        self.profiles.append(("MainThread", main))
        threading.setprofile(self._start_in_thread)
        main.enable()
        try:
            yield
        finally:
            main.disable()
            threading.setprofile(None)  # type: ignore[arg-type]

    def report(self, out: Path, top: int = 30) -> str:
        """Merged stats, sorted by own time and by cumulative time; also saved to ``out``."""
        stats: pstats.Stats | None = None
        per_thread: dict[str, float] = {}
        for name, p in self.profiles:
            try:
                s = pstats.Stats(p)
            except TypeError:  # a thread that recorded nothing
                continue
            kind = name.rstrip("0123456789_-")
            per_thread[kind] = per_thread.get(kind, 0.0) + s.total_tt  # type: ignore[attr-defined]
            if stats is None:
                stats = s
            else:
                stats.add(s)
        if stats is None:
            return "nothing was recorded"
        stats.dump_stats(str(out))
        lines = ["own time by thread kind (wall clock, waits included): "]
        lines[0] += ", ".join(f"{k} {v:.3f}s" for k, v in sorted(per_thread.items(), key=lambda kv: -kv[1]))
        raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
        busy = [(k, v) for k, v in raw.items() if k[2] not in IDLE]
        lines.append(f"\ntop {top} by own time (idle waits left out: {', '.join(sorted(IDLE))}):")
        lines.append(f"{'calls':>9} {'own s':>8} {'cum s':>8}  function")
        for (file, line, func), (_cc, nc, tt, ct, _callers) in sorted(busy, key=lambda kv: -kv[1][2])[:top]:
            lines.append(f"{nc:>9} {tt:>8.4f} {ct:>8.4f}  {_where(file, line, func)}")
        lines.append(f"\ntop {top} plait functions by cumulative time:")
        mine = [(k, v) for k, v in busy if "/plait/" in k[0]]
        for (file, line, func), (_cc, nc, tt, ct, _callers) in sorted(mine, key=lambda kv: -kv[1][3])[:top]:
            lines.append(f"{nc:>9} {tt:>8.4f} {ct:>8.4f}  {_where(file, line, func)}")
        return "\n".join(lines)


IDLE = {
    "<method 'get' of '_queue.SimpleQueue' objects>",
    "<method 'poll' of 'select.epoll' objects>",
    "<method 'acquire' of '_thread.lock' objects>",
    "<method 'wait' of 'threading.Condition' objects>",
}
"""Calls that only wait for another thread or for the event loop; their time is not work."""


def _where(file: str, line: int, func: str) -> str:
    if file == "~":
        return func
    parts = Path(file).parts
    short = "/".join(parts[parts.index("plait") :]) if "plait" in parts else Path(file).name
    return f"{short}:{line}({func})"


def _profile() -> cProfile.Profile:
    if os.environ.get("PLAIT_PROFILE_CPU") == "1":
        return cProfile.Profile(time.thread_time)
    return cProfile.Profile()
