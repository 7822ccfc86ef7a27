"""The graphs the runs tests submit (not a test module): loaded by name by the workers,
in-process and as `plait worker` subprocesses, as ``<this file>:GRAPH``.

``steps``: one node that runs ``steps`` times (from the input), appending ``"<tag>:<i>"``
to ``log`` each time and sleeping ``pause`` seconds first, so tests can catch a run between
super-steps. Every node start appends one line to the file named by ``PLAIT_TEST_LEDGER``
(when set): which run attempt ran which step, whether or not its process lived to commit.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from plait import END, START, AppendList, Graph, LastWriteWins, MemoryCheckpointer, StateSchema, interrupt

HERE = Path(__file__).resolve().parent
FILE = str(HERE / "_run_flows.py")


def name(graph: str) -> str:
    """The name workers know ``graph`` of this file by."""
    return f"{FILE}:{graph}"


schema = (
    StateSchema.builder()
    .add("log", AppendList())
    .add("steps", LastWriteWins(), default=1)
    .add("pause", LastWriteWins(), default=0.0)
    .add("tag", LastWriteWins(), default="")
    .add("answer", LastWriteWins(), default=None)
    .build()
)


def _ledger(line: str) -> None:
    path = os.environ.get("PLAIT_TEST_LEDGER")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


async def step(state: Any) -> dict[str, Any]:
    i = len([x for x in state["log"] if str(x).startswith(f"{state['tag']}:")])
    _ledger(f"{state['tag']}:{i}:{os.getpid()}")
    gate = os.environ.get("PLAIT_TEST_GATE")
    while gate and i >= 3 and not os.path.exists(gate):  # held from the fourth step on, until the test opens it
        await asyncio.sleep(0.01)
    if state["pause"]:
        await asyncio.sleep(state["pause"])
    return {"log": [f"{state['tag']}:{i}"]}


def _again(state: Any) -> str:
    done = len([x for x in state["log"] if str(x).startswith(f"{state['tag']}:")])
    return "step" if done < state["steps"] else END


steps = Graph(schema)
steps.add_node("step", step)
steps.add_edge(START, "step")
steps.add_conditional_edges("step", _again)


async def one(state: Any) -> dict[str, Any]:
    return {"log": ["one"]}


single = Graph(schema)
single.add_node("one", one)
single.add_edge(START, "one")
single.add_edge("one", END)


held = single.compile(checkpointer=MemoryCheckpointer(), interrupt_before=["one"])
"""``single`` with a breakpoint before its node (a worker binds it to its own checkpointer)."""


def ask(state: Any) -> dict[str, Any]:
    return {"answer": interrupt({"question": "yes?"})}


asking = Graph(schema)
asking.add_node("ask", ask)
asking.add_edge(START, "ask")
asking.add_edge("ask", END)


def broken(state: Any) -> dict[str, Any]:
    raise RuntimeError("this node always fails")


failing = Graph(schema)
failing.add_node("broken", broken)
failing.add_edge(START, "broken")
failing.add_edge("broken", END)
