"""Token streaming: how long a chunk takes from the node that yields it to the caller of
``astream(mode="messages")`` (target: p50 ≤ 1 ms).

Run: ``python -m benchmarks.token_latency [--chunks 2000] [--gap-ms 0.2]``. A node streams a
"model" whose generator notes the time right before it yields each chunk, then waits
``--gap-ms`` (a network read between two tokens); the caller notes the time each chunk
arrives. Printed per case (an async node with ``ctx.astream_message``, a sync node with
``ctx.stream_message`` in its worker thread; on the memory store and on SQLite): the median
and the 99th percentile of the differences, in microseconds; then the same on the memory
store through the sync facade (``stream()``, iterated in the caller's thread). The store is not on a chunk's
path (only the finished message is checkpointed), so the two backends should match.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any


def _graph(sync: bool, chunks: int, gap: float, sent: list[int]) -> Any:
    from plait import END, START, Graph, MessagesState, NodeContext

    def model() -> Iterator[str]:
        for i in range(chunks):
            sent.append(time.perf_counter_ns())
            yield f"t{i} "
            time.sleep(gap)

    async def amodel() -> AsyncIterator[str]:
        for i in range(chunks):
            sent.append(time.perf_counter_ns())
            yield f"t{i} "
            await asyncio.sleep(gap)

    def chat(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"messages": [ctx.stream_message(model())]}

    async def achat(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"messages": [await ctx.astream_message(amodel())]}

    g = Graph(MessagesState).add_node("chat", chat if sync else achat)
    return g.add_edge(START, "chat").add_edge("chat", END)


async def _case(sync: bool, checkpointer: Any, chunks: int, gap: float) -> list[float]:
    sent: list[int] = []
    got: list[int] = []
    app = _graph(sync, chunks, gap, sent).compile(checkpointer=checkpointer)
    ask = {"messages": [{"role": "user", "content": "go"}]}
    async for chunk, _ in app.astream(ask, mode="messages", thread_id="t"):
        if chunk["type"] == "AIMessageChunk":
            got.append(time.perf_counter_ns())
    app.close()
    assert len(got) == len(sent) == chunks
    return [(b - a) / 1000 for a, b in zip(sent, got, strict=True)]


def _sync_caller(sync: bool, chunks: int, gap: float) -> list[float]:
    """The same through the sync facade: ``stream()`` iterated in this thread."""
    from plait import MemoryCheckpointer

    sent: list[int] = []
    got: list[int] = []
    with _graph(sync, chunks, gap, sent).compile(checkpointer=MemoryCheckpointer()) as app:
        for chunk, _ in app.stream({"messages": []}, mode="messages", thread_id="t"):
            if chunk["type"] == "AIMessageChunk":
                got.append(time.perf_counter_ns())
    return [(b - a) / 1000 for a, b in zip(sent, got, strict=True)]


def _row(name: str, us: list[float]) -> str:
    us = sorted(us)
    p99 = us[min(len(us) - 1, int(len(us) * 0.99))]
    return f"{name:<34} p50 {statistics.median(us):7.1f} µs   p99 {p99:7.1f} µs   ({len(us)} chunks)"


def main(argv: list[str] | None = None) -> None:
    from plait import MemoryCheckpointer

    p = argparse.ArgumentParser(prog="python -m benchmarks.token_latency")
    p.add_argument("--chunks", type=int, default=2000)
    p.add_argument("--gap-ms", type=float, default=0.2, help="the model's wait between two chunks")
    args = p.parse_args(argv)
    gap = args.gap_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        for store in ("memory", "sqlite"):
            for sync in (False, True):
                saver: Any = MemoryCheckpointer() if store == "memory" else str(Path(tmp) / f"{sync}.db")
                asyncio.run(_case(sync, saver, 50, gap))  # warm-up (thread pool, imports)
                saver = MemoryCheckpointer() if store == "memory" else str(Path(tmp) / f"{sync}-run.db")
                us = asyncio.run(_case(sync, saver, args.chunks, gap))
                node = "sync node, stream_message" if sync else "async node, astream_message"
                print(_row(f"{store:<7}{node}", us))
    for sync in (False, True):
        _sync_caller(sync, 50, gap)
        node = "sync node" if sync else "async node"
        print(_row(f"memory {node}, sync stream()", _sync_caller(sync, args.chunks, gap)))


if __name__ == "__main__":
    main()
