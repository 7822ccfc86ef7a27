"""Memory stores: plait's ``Store`` beside LangGraph's ``InMemoryStore``, ``SqliteStore`` and
``PostgresStore``, one backend pair at a time.

Run: ``python -m benchmarks.store_bench [--quick] [--postgres DSN] [--profile]`` (PostgreSQL
also from ``$PLAIT_BENCH_POSTGRES_DSN``; plait's tables go in a scratch schema, LangGraph's in
a scratch database, both dropped after; the SQLite files go in a scratch folder on disk).
Workloads, each timed call by call through the sync API a script uses (median, p99):

1. put: single puts, sequential, a fresh key each (on SQLite also against LangGraph's store
   with its connection switched to WAL, as plait's is: its ``from_conn_string`` keeps SQLite's
   rollback journal); then the 100,000-item fill, in ``batch`` calls of 1,000 puts (both
   libraries have ``batch``). On PostgreSQL both sides' tables are analysed after each fill,
   as autovacuum does within a minute of a bulk load (a plan made on a fresh table's missing
   statistics can be far off: see docs/benchmarks.md);
2. get: single gets of random existing keys (of the 100,000);
3. filtered search over the 100,000 items (five namespaces under ``("bench",)``): equality,
   range, a nested field, both at once, and a filter nothing matches, ``limit=10``; every
   result is checked against the data, and a filter a side cannot express is reported as not
   runnable there, never run with another meaning;
4. semantic search over 10,000 items with 64-number vectors from one deterministic fake
   embedding (:func:`benchmarks._store_sides.fake_embed`) given to both libraries, the top 10
   checked against a brute-force ranking. A store that cannot index here (LangGraph's SQLite
   store needs the sqlite-vec extension, its PostgreSQL store pgvector) is reported with why.

Then plait's own layers on each backend: the whole call, the backend call alone (no checks,
no sync facade) and, for puts, the database's commit floor. ``--profile`` also prints plait's
hottest functions per backend (cProfile over its timed calls).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import random
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks._common import PG_ENV, make_workdir, pg_commit_floor, sqlite_commit_floor
from benchmarks._store_sides import (
    FILTERS,
    LG,
    PLAIT,
    NotRunnable,
    Side,
    fake_embed,
    items,
    make_env,
    open_side,
)

LIBS = (PLAIT, LG)


@dataclass(frozen=True, kw_only=True)
class Sizes:
    puts: int
    batch: int
    gets: int
    fill: int
    searches: int
    semantic: int
    queries: int


FULL = Sizes(puts=1000, batch=1000, gets=2000, fill=100_000, searches=100, semantic=10_000, queries=30)
QUICK = Sizes(puts=50, batch=100, gets=100, fill=1000, searches=10, semantic=300, queries=5)


@dataclass
class Row:
    """One case on one backend: each library's samples (seconds) or why it has none."""

    workload: str
    case: str
    backend: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def p50(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def p99(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(0.99 * len(s)) - 1)]


class Timer:
    """Times calls one by one; plait's under cProfile when ``--profile`` is given."""

    def __init__(self, profile: bool) -> None:
        self.profiler = cProfile.Profile() if profile else None

    def run(self, lib: str, calls: Sequence[Callable[[], Any]]) -> list[float]:
        prof = self.profiler if lib == PLAIT else None
        out = []
        for call in calls:
            if prof is not None:
                prof.enable()
            t0 = time.perf_counter()
            call()
            out.append(time.perf_counter() - t0)
            if prof is not None:
                prof.disable()
        return out

    def alternate(self, calls: Mapping[str, Sequence[Callable[[], Any]]], rounds: int = 10) -> dict[str, list[float]]:
        """Each library's calls in ``rounds`` slices, the libraries taking turns (the one
        that goes first swapping every round), so that a busy spell of the machine lands on
        both alike."""
        out: dict[str, list[float]] = {lib: [] for lib in calls}
        order = list(calls)
        for r in range(rounds):
            for lib in order if r % 2 == 0 else order[::-1]:
                todo = calls[lib]
                lo, hi = len(todo) * r // rounds, len(todo) * (r + 1) // rounds
                out[lib] += self.run(lib, todo[lo:hi])
        return out

    def report(self, top: int = 25) -> str:
        if self.profiler is None:
            return ""
        buf = io.StringIO()
        pstats.Stats(self.profiler, stream=buf).sort_stats("tottime").print_stats(top)
        self.profiler = cProfile.Profile()
        return buf.getvalue()


# --------------------------------------------------------------------------- the workloads


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


def run_backend(backend: str, sizes: Sizes, env: Any, timer: Timer, log: Callable[[str], None]) -> list[Row]:
    """Workloads 1-3 on one backend, both libraries, then workload 4 on fresh stores."""
    rows: list[Row] = []
    sides: dict[str, Side] = {}
    missing: dict[str, str] = {}
    try:
        for lib in LIBS:
            try:
                sides[lib] = open_side(lib, backend, env)
            except NotRunnable as exc:
                missing[lib] = f"not runnable here: {exc}"
                log(f"{backend}/{lib}: {missing[lib]}")
        rows += _puts(backend, sizes, sides, env, timer, log)
        rows += _gets(backend, sizes, sides, timer)
        rows += _searches(backend, sizes, sides, timer, log)
        if PLAIT in sides:
            rows += _layers(backend, sizes, sides[PLAIT], env)
    finally:
        for s in sides.values():
            s.close()
    rows += _semantic(backend, sizes, env, timer, log)
    for r in rows:
        for lib, why in missing.items():
            r.notes.setdefault(lib, why)
    return rows


def _puts(
    backend: str, sizes: Sizes, sides: dict[str, Side], env: Any, timer: Timer, log: Callable[[str], None]
) -> list[Row]:
    data = items(sizes.fill)
    one = Row("put", "one item (fresh key)", backend)
    many = Row("put", f"batch of {sizes.batch:,} puts", backend)
    for side in sides.values():
        for i in range(10):  # warm-up: connections, statements, first pages
            side.put(("w1", "warm"), f"w-{i}", data[i][2])
    one.samples = timer.alternate(
        {
            lib: [_bind(side.put, ("w1", "puts"), f"p-{i}", data[i % len(data)][2]) for i in range(sizes.puts)]
            for lib, side in sides.items()
        }
    )
    rows = [one]
    if backend == "sqlite" and LG in sides:
        rows.append(_lg_wal_puts(sizes, sides, env, timer))
    batches = [data[i : i + sizes.batch] for i in range(0, len(data), sizes.batch)]
    t0 = time.perf_counter()
    many.samples = timer.alternate({lib: [_bind(side.put_many, b) for b in batches] for lib, side in sides.items()})
    log(f"{backend}: {len(data):,} items written to each store in {time.perf_counter() - t0:.1f} s")
    for side in sides.values():
        side.analyze()
    return [*rows, many]


def _lg_wal_puts(sizes: Sizes, sides: dict[str, Side], env: Any, timer: Timer) -> Row:
    """The same puts with LangGraph's SQLite connection switched to WAL, as plait's is (its
    ``from_conn_string`` leaves SQLite's default rollback journal): what a user tuning it gets."""
    row = Row("put", "one item, LangGraph's SQLite in WAL mode", "sqlite")
    wal = open_side(LG, "sqlite", env, wal=True)
    try:
        value = items(sizes.fill)[0][2]
        for i in range(10):
            wal.put(("w1", "warm"), f"w-{i}", value)
        both = {lib: side for lib, side in ((PLAIT, sides.get(PLAIT)), (LG, wal)) if side is not None}
        row.samples = timer.alternate(
            {
                lib: [_bind(side.put, ("w1", "wal"), f"p-{i}", value) for i in range(sizes.puts)]
                for lib, side in both.items()
            }
        )
    finally:
        wal.close()
    return row


def _gets(backend: str, sizes: Sizes, sides: dict[str, Side], timer: Timer) -> list[Row]:
    data = items(sizes.fill)
    picks = random.Random(3).choices(range(len(data)), k=sizes.gets)
    row = Row("get", "one item (random existing key)", backend)
    calls = {}
    for lib, side in sides.items():
        for k in picks[:20]:
            got = side.get(data[k][0], data[k][1])
            if got != data[k][2]:
                row.notes[lib] = f"wrong result: {got!r:.60}"
                break
        else:
            calls[lib] = [_bind(side.get, data[k][0], data[k][1]) for k in picks]
    row.samples = timer.alternate(calls)
    return [row]


def _searches(
    backend: str, sizes: Sizes, sides: dict[str, Side], timer: Timer, log: Callable[[str], None]
) -> list[Row]:
    data = items(sizes.fill)
    rows = []
    for case in FILTERS:
        row = Row("search", case.label, backend)
        expect = min(10, sum(1 for _, _, v in data if case.check(v)))
        calls = {}
        for lib, side in sides.items():
            try:
                flt = side.filter_for(case)
            except NotRunnable as exc:
                row.notes[lib] = f"not runnable: {exc}"
                continue
            found = side.search(("bench",), flt, 10)
            bad = [v for v in found if not case.check(v)]
            if len(found) != expect or bad:
                row.notes[lib] = f"wrong result: {len(found)} items ({len(bad)} not matching), expected {expect}"
                log(f"{backend}/{lib} {case.label}: {row.notes[lib]}")
                continue
            calls[lib] = [_bind(side.search, ("bench",), flt, 10)] * sizes.searches
        row.samples = timer.alternate(calls)
        rows.append(row)
    return rows


def _ranking(data: Sequence[tuple[Any, str, dict[str, Any]]], query: str) -> list[str]:
    """The brute-force top 10 keys by cosine similarity of the fake vectors."""

    def unit(v: list[float]) -> list[float]:
        n = math.sqrt(sum(x * x for x in v))
        return [x / n for x in v]

    (q,) = fake_embed([query])
    q = unit(q)
    vecs = fake_embed([v["text"] for _, _, v in data])
    scored = sorted(
        ((-sum(a * b for a, b in zip(q, unit(v), strict=True)), key) for (_, key, _), v in zip(data, vecs, strict=True))
    )
    return [key for _, key in scored[:10]]


def _semantic(backend: str, sizes: Sizes, env: Any, timer: Timer, log: Callable[[str], None]) -> list[Row]:
    data = items(sizes.semantic, seed=64)
    fill = Row("semantic", f"batch of {sizes.batch:,} puts, embedded", backend)
    row = Row("semantic", f"query, top 10 of {sizes.semantic:,}", backend)
    words = ["golf", "kilo", "mike", "echo"]
    queries = [f"query {i}: " + " ".join(random.Random(i).choices(words, k=4)) for i in range(sizes.queries)]
    expect = _ranking(data, queries[0])
    sides: dict[str, Side] = {}
    try:
        for lib in LIBS:
            try:
                sides[lib] = open_side(lib, backend, env, index=True)
            except NotRunnable as exc:
                fill.notes[lib] = row.notes[lib] = f"not runnable here: {exc}"
                log(f"{backend}/{lib} semantic: {exc}")
        batches = [data[i : i + sizes.batch] for i in range(0, len(data), sizes.batch)]
        fill.samples = timer.alternate({lib: [_bind(s.put_many, b) for b in batches] for lib, s in sides.items()})
        for side in sides.values():
            side.analyze()
        calls = {}
        for lib, side in sides.items():
            got = side.query(("bench",), queries[0], 10)
            if got != expect:
                row.notes[lib] = f"wrong result: top 10 {got[:3]}... expected {expect[:3]}..."
                continue
            calls[lib] = [_bind(side.query, ("bench",), q, 10) for q in queries]
        row.samples = timer.alternate(calls, rounds=5)
    finally:
        for side in sides.values():
            side.close()
    return [fill, row]


def _layers(backend: str, sizes: Sizes, side: Side, env: Any) -> list[Row]:
    """plait's own layers: the public call, the backend's call alone, the commit floor."""
    from plait._sync import run_sync

    store = side.store
    data = items(sizes.fill)
    n = min(sizes.puts, 500)
    rows = []
    put = Row("plait layers", "put: backend acommit alone", backend)
    writes = [run_sync(store.prepare_put(("w1", "layer"), f"l-{i}", data[i][2])) for i in range(n)]
    put.samples[PLAIT] = Timer(False).run(PLAIT, [_sync(_commit(store, w)) for w in writes])
    rows.append(put)
    if backend in ("sqlite", "postgres"):
        floor = Row("plait layers", "put: the database's commit floor (one small row)", backend)
        floor.samples[PLAIT] = (
            sqlite_commit_floor(env.workdir, n, room=True) if backend == "sqlite" else pg_commit_floor(env.pg_dsn, n)
        )
        rows.append(floor)
    picks = random.Random(3).choices(range(len(data)), k=sizes.gets)
    get = Row("plait layers", "get: backend aget_memory alone", backend)
    get.samples[PLAIT] = Timer(False).run(
        PLAIT,
        [_sync(_aget(store, data[k][0], data[k][1])) for k in picks],
    )
    rows.append(get)
    for case in FILTERS[1:3]:
        srch = Row("plait layers", f"search {case.label}: backend alone", backend)
        spec = run_sync(store.search_for(("bench",), filter=case.filter, limit=10))
        srch.samples[PLAIT] = Timer(False).run(PLAIT, [_sync(_asearch(store, spec))] * sizes.searches)
        rows.append(srch)
    return rows


def _sync(make: Callable[[], Any]) -> Callable[[], Any]:
    from plait._sync import run_sync

    return lambda: run_sync(make())


def _commit(store: Any, w: Any) -> Callable[[], Any]:
    return lambda: store.backend.acommit(memory=[w])


def _aget(store: Any, ns: tuple[str, ...], key: str) -> Callable[[], Any]:
    return lambda: store.backend.aget_memory(ns, key, now=store.now(), refresh=True)


def _asearch(store: Any, spec: Any) -> Callable[[], Any]:
    return lambda: store.backend.asearch_memory(spec)


# --------------------------------------------------------------------------- the report


def _ms(x: float) -> str:
    ms = x * 1e3
    return f"{ms:,.3f}" if ms < 1 else f"{ms:,.2f}" if ms < 100 else f"{ms:,.0f}"


def render(rows: Sequence[Row]) -> str:
    """A plain table: p50 and p99 in ms per library, and LangGraph's p50 over plait's."""
    head = (
        f"{'workload':<14}{'case':<44}{'backend':<10}{'plait p50':>11}{'p99':>10}{'LG p50':>11}{'p99':>10}"
        f"{'LG/plait':>10}"
    )
    out = [head, "-" * len(head)]
    notes: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        cells = []
        for lib in LIBS:
            s = r.samples.get(lib)
            if s:
                cells += [_ms(p50(s)), _ms(p99(s))]
            else:
                cells += ["n/a" if lib in r.notes else "", ""]
                if lib in r.notes:
                    notes.setdefault((r.backend, lib, r.notes[lib]), []).append(r.case)
        a, b = r.samples.get(PLAIT), r.samples.get(LG)
        ratio = f"{p50(b) / p50(a):.2f}x" if a and b else ""
        out.append(
            f"{r.workload:<14}{r.case[:43]:<44}{r.backend:<10}{cells[0]:>11}{cells[1]:>10}{cells[2]:>11}{cells[3]:>10}{ratio:>10}"
        )
    out.append("\nms per call; LG/plait = LangGraph p50 / plait p50 (> 1: plait is faster).")
    for (backend, lib, why), cases in notes.items():
        every = len(cases) == sum(1 for r in rows if r.backend == backend)
        out.append(f"n/a  {backend}, {lib}, {'every case' if every else '; '.join(cases)}:\n     {why}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.store_bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    ap.add_argument("--postgres", metavar="DSN", default=os.environ.get(PG_ENV))
    ap.add_argument("--backends", default="memory,sqlite,postgres", help="comma-separated: memory,sqlite,postgres")
    ap.add_argument("--profile", action="store_true", help="print plait's hottest functions per backend (cProfile)")
    ap.add_argument("--workdir", help="parent folder for the SQLite files (must not be tmpfs)")
    a = ap.parse_args(argv)
    sizes = QUICK if a.quick else FULL
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    if "postgres" in backends and not a.postgres:
        print(f"note: no --postgres DSN (or ${PG_ENV}): the PostgreSQL rows are skipped")
        backends.remove("postgres")
    workdir = make_workdir(a.workdir)
    env = make_env(workdir, a.postgres)
    timer = Timer(a.profile)
    rows: list[Row] = []

    def log(msg: str) -> None:
        print(f"  {msg}", flush=True)

    try:
        for backend in backends:
            log(f"{backend}: running (load average {os.getloadavg()[0]:.1f})")
            rows += run_backend(backend, sizes, env, timer, log)
            log(f"{backend}: done (load average {os.getloadavg()[0]:.1f})")
            if a.profile:
                print(f"\nplait's hottest functions on {backend} (tottime):\n{timer.report()}")
    finally:
        env.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
