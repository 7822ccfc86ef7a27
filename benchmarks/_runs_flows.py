"""The graphs benchmarks/runs_throughput.py submits; workers load them as ``<this file>:GRAPH``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from plait import END, START, AppendList, Graph, LastWriteWins, StateSchema

FILE = str(Path(__file__).resolve())


def name(graph: str) -> str:
    return f"{FILE}:{graph}"


schema = (
    StateSchema.builder()
    .add("stamps", AppendList())
    .add("n", LastWriteWins(), default=0)
    .add("steps", LastWriteWins(), default=1)
    .add("pause", LastWriteWins(), default=0.0)
    .build()
)


async def one_node(state: Any) -> dict[str, Any]:
    return {"n": state["n"] + 1}


async def stamp_node(state: Any) -> dict[str, Any]:
    return {"stamps": [time.time()]}


async def sleep_node(state: Any) -> dict[str, Any]:
    await asyncio.sleep(1.0)
    return {"n": 1}


async def step_node(state: Any) -> dict[str, Any]:
    started = time.time()
    await asyncio.sleep(state["pause"])
    return {"stamps": [started]}


def _single(fn: Any) -> Graph:
    g = Graph(schema)
    g.add_node("node", fn)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    return g


one = _single(one_node)
stamp = _single(stamp_node)
sleepy = _single(sleep_node)

steps = Graph(schema)
steps.add_node("node", step_node)
steps.add_edge(START, "node")
steps.add_conditional_edges("node", lambda s: "node" if len(s["stamps"]) < s["steps"] else END)
