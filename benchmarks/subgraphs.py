"""Subgraph storage: a parent whose node is a 3-level nested subgraph, the innermost appending
one ~1 KB message per step, against the same steps in a flat graph, on SQLite.

Run: ``python -m benchmarks.subgraphs [--steps 100,200,400] [--reps 3]``. Prints, per step
count, the bytes the store grew by, the message bytes written, their ratio, and the time per
step, for both shapes, then the log-log slope of stored bytes against steps (1.0: the store
grows as the bytes written, O(written bytes); a store that copied the whole list into every
checkpoint would approach 2). Every subgraph checkpoint is stored by the same delta rule as
the parent's, so the nested shape costs what the flat one does plus each level's few
checkpoints.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import random_messages, sqlite_file_bytes
from benchmarks._report import loglog_slope


def _schema() -> Any:
    from plait import AppendList, StateSchema

    return StateSchema.builder().add("messages", AppendList()).build()


def _talker(msgs: list[str]) -> Any:
    """``say`` appends the next message and loops until all of ``msgs`` are in."""
    from plait import END, START, Graph

    n = len(msgs)
    g = Graph(_schema())
    g.add_node("say", lambda s: {"messages": [{"id": str(len(s["messages"])), "content": msgs[len(s["messages"])]}]})
    g.add_edge(START, "say")
    g.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < n else END)
    return g


def nested_graph(msgs: list[str], levels: int = 3) -> Any:
    """``levels`` graphs, each the single node of the next, around the talker."""
    from plait import END, START, Graph

    inner = _talker(msgs).compile()
    for level in range(levels):
        g = Graph(_schema()).add_node(f"level{level + 1}", inner)
        g.add_edge(START, f"level{level + 1}").add_edge(f"level{level + 1}", END)
        inner = g.compile()
    return g


def measure(shape: str, steps: int, folder: Path) -> tuple[int, int, float]:
    """(bytes the store grew by, message bytes written, seconds per step) for one run."""
    from plait import SqliteCheckpointer

    msgs = random_messages(steps)
    path = folder / f"{shape}-{steps}.db"
    saver = SqliteCheckpointer(path)
    _talker(msgs[:1]).compile(checkpointer=saver).invoke({"messages": []}, thread_id="warm")  # schema created
    saver.close()
    empty = sqlite_file_bytes(path)
    saver = SqliteCheckpointer(path)
    graph = (nested_graph(msgs) if shape == "nested" else _talker(msgs)).compile(checkpointer=saver)
    t0 = time.perf_counter()
    out = graph.invoke({"messages": []}, thread_id="t", recursion_limit=steps + 10)
    elapsed = time.perf_counter() - t0
    saver.close()
    assert len(out["messages"]) == steps
    written = sum(len(m) for m in msgs)
    return sqlite_file_bytes(path) - empty, written, elapsed / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="100,200,400")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    counts = [int(s) for s in args.steps.split(",")]
    print(f"{'shape':8} {'steps':>6} {'stored KB':>10} {'written KB':>11} {'ratio':>6} {'ms/step':>8}")
    sizes: dict[str, list[float]] = {"flat": [], "nested": []}
    with tempfile.TemporaryDirectory() as tmp:
        for steps in counts:
            for shape in ("flat", "nested"):
                runs = [measure(shape, steps, Path(tmp) / f"r{r}") for r in range(args.reps) if _mkdir(tmp, r)]
                stored = statistics.median(r[0] for r in runs)
                written = runs[0][1]
                per_step = statistics.median(r[2] for r in runs)
                sizes[shape].append(stored)
                print(
                    f"{shape:8} {steps:>6} {stored / 1000:>10.1f} {written / 1000:>11.1f} "
                    f"{stored / written:>6.2f} {per_step * 1000:>8.2f}"
                )
    for shape, ys in sizes.items():
        slope = loglog_slope([float(c) for c in counts], ys)
        print(f"{shape}: log-log slope of stored bytes against steps = {slope:.2f}" if slope else shape)


def _mkdir(tmp: str, rep: int) -> bool:
    (Path(tmp) / f"r{rep}").mkdir(exist_ok=True)
    return True


if __name__ == "__main__":
    main()
