"""What tracing costs a run: W1 (a chain of tiny steps, :func:`benchmarks.pl.counter_graph`)
with tracing off, on with OpenTelemetry's no-op provider, and on with the SDK's provider
exporting through a ``BatchSpanProcessor`` to an exporter that drops the spans.

Run: ``python -m benchmarks.tracing_bench [--steps 300] [--repeats 15] [--backends memory,sqlite]
[--durability sync|async|exit]``
(``--quick``: a smoke test). Needs ``opentelemetry-sdk`` (the dev extra) besides ``plait[bench]``.

Each repeat runs every mode once on a fresh thread, the modes taking turns in an order that
rotates each repeat, so that a busy spell of the machine lands on all of them alike; one run
of each mode first warms it up (imports, the SQLite file, the provider's worker thread). It
prints, per backend and mode, the median µs per step over the repeats (and the spread of
the middle half), the overhead per step against ``off`` (the median of each repeat's
difference to its own ``off`` run), and the spans one run made. The batch
processor's queue is flushed after each run, outside the timed part: the export thread's work
during the run is what a real program pays, the backlog of the previous run is not.
The runs use plait's default durability (``sync``: on SQLite each step's commit waits for the
disk) unless ``--durability`` says otherwise; SQLite's file is in a scratch folder on disk.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import make_workdir
from benchmarks.pl import counter_graph

MODES = ("off", "no-op provider", "SDK, batch, dropped")


class Dropped:
    """A span exporter that keeps nothing: the cost measured is plait's and the SDK's, not a
    network's. Counts what it was given, to show the spans were made."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class Modes:
    """The three ways to run: ``use(mode)`` instruments (or not) before a run, ``after()``
    flushes the batch processor between runs."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import NoOpTracerProvider

        self.noop = NoOpTracerProvider()
        self.dropped = Dropped()
        self.sdk = TracerProvider()
        self.sdk.add_span_processor(BatchSpanProcessor(self.dropped))  # type: ignore[arg-type]

    def use(self, mode: str) -> None:
        import plait

        if mode == "off":
            plait.uninstrument()
        elif mode == "no-op provider":
            plait.instrument(tracer_provider=self.noop)
        else:
            plait.instrument(tracer_provider=self.sdk)

    def after(self) -> None:
        self.sdk.force_flush()

    def close(self) -> None:
        import plait

        plait.uninstrument()
        self.sdk.shutdown()


@contextmanager
def checkpointer(backend: str, folder: Path) -> Iterator[Any]:
    import plait

    if backend == "memory":
        yield plait.MemoryCheckpointer()
        return
    cp = plait.SqliteCheckpointer(str(folder / "tracing.db"))
    try:
        cp.setup()
        yield cp
    finally:
        cp.close()


def one_run(app: Any, steps: int, durability: str) -> float:
    """Seconds per step of one ``invoke`` of the ``steps``-step chain on a new thread."""
    t0 = time.perf_counter()
    out = app.invoke({"n": 0}, thread_id=uuid.uuid4().hex, recursion_limit=steps + 10, durability=durability)
    took = time.perf_counter() - t0
    assert out["n"] == steps, out
    return took / steps


def measure(backend: str, steps: int, repeats: int, folder: Path, modes: Modes, durability: str) -> dict[str, Any]:
    """Samples (µs per step) of each mode on ``backend``, and the spans a traced run made."""
    samples: dict[str, list[float]] = {m: [] for m in MODES}
    with checkpointer(backend, folder) as cp:
        app = counter_graph(steps).compile(checkpointer=cp)
        for mode in MODES:  # warm-up
            modes.use(mode)
            one_run(app, steps, durability)
            modes.after()
        before = modes.dropped.spans
        for rep in range(repeats):
            turn = MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]
            for mode in turn:
                modes.use(mode)
                samples[mode].append(one_run(app, steps, durability) * 1e6)
                modes.after()
        spans = (modes.dropped.spans - before) / repeats
    modes.use("off")
    return {"samples": samples, "spans_per_run": spans}


def rows(backend: str, result: dict[str, Any]) -> list[tuple[str, str, float, float, float, float]]:
    """(backend, mode, median µs/step, its p25-p75 spread, overhead µs/step against off,
    overhead %). The overhead is the median of each repeat's difference to that repeat's
    ``off`` run (paired: a slow spell of the machine lands on both sides of a difference)."""
    samples = result["samples"]
    off = samples["off"]
    out = []
    for m in MODES:
        q1, _, q3 = statistics.quantiles(samples[m], n=4) if len(samples[m]) > 1 else (0.0, 0.0, 0.0)
        extra = statistics.median(a - b for a, b in zip(samples[m], off, strict=True))
        out.append((backend, m, statistics.median(samples[m]), q3 - q1, extra, extra / statistics.median(off) * 100))
    return out


def print_rows(
    found: list[tuple[str, str, float, float, float, float]],
    steps: int,
    repeats: int,
    spans: dict[str, float],
    durability: str,
) -> None:
    print(f"W1, a chain of {steps} tiny steps, durability {durability}; {repeats} runs per mode, interleaved")
    print(f"{'backend':8} {'tracing':22} {'µs/step':>9} {'p75-p25':>8} {'overhead µs/step':>17} {'overhead':>9}")
    for backend, mode, us, spread, extra, pct in found:
        over = "-" if mode == "off" else f"{extra:+.1f}"
        share = "-" if mode == "off" else f"{pct:+.0f}%"
        print(f"{backend:8} {mode:22} {us:9.1f} {spread:8.1f} {over:>17} {share:>9}")
    for backend, n in spans.items():
        print(f"{backend}: {n:.0f} spans per traced run ({n / steps:.2f} per step)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tracing_bench", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps of the chain (default 300)")
    p.add_argument("--repeats", type=int, default=15, help="runs of each mode per backend (default 15)")
    p.add_argument("--backends", default="memory,sqlite", help="comma-separated: memory,sqlite")
    p.add_argument("--quick", action="store_true", help="a smoke test: 50 steps, 3 repeats")
    p.add_argument("--durability", default="sync", help="sync (plait's default), async or exit")
    p.add_argument("--workdir", help="parent folder of the SQLite scratch folder (not tmpfs)")
    args = p.parse_args(argv)
    steps, repeats = (50, 3) if args.quick else (args.steps, args.repeats)
    folder = make_workdir(args.workdir)
    modes = Modes()
    found: list[tuple[str, str, float, float, float, float]] = []
    spans: dict[str, float] = {}
    try:
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            if backend not in ("memory", "sqlite"):
                raise SystemExit(f"--backends: memory or sqlite, not {backend!r}")
            result = measure(backend, steps, repeats, folder, modes, args.durability)
            found += rows(backend, result)
            spans[backend] = result["spans_per_run"]
    finally:
        modes.close()
        shutil.rmtree(folder, ignore_errors=True)
    print_rows(found, steps, repeats, spans, args.durability)


if __name__ == "__main__":
    main()
