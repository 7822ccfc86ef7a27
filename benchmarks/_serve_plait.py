"""The serve benchmark's graphs for plait, and a server over them.

``python -m benchmarks._serve_plait DB PORT [--schema S] [--profile FILE]`` serves them over
``DB`` on ``127.0.0.1:PORT``: ``create_app`` under uvicorn, as the tests do, which is what
``benchmarks.serve_bench`` starts by default (with ``--cli`` it starts ``plait serve --graph
one=benchmarks._serve_plait:one ...`` instead).

It serves the same three graphs as LangGraph's side (``benchmarks/_serve_lg_graphs.py``):
``one`` (one node), ``steps`` (one node looping ten times) and ``chat`` (a node that streams
:data:`DELTAS` as one message's chunks). ``DB`` may also be a ``postgresql://`` address
(``--schema`` names a schema in it). With ``--profile`` the whole process runs under cProfile
(every thread) and writes ``FILE`` when it stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import uvicorn

from plait import END, START, AppendMessages, Command, Graph, NodeContext, Sum
from plait.checkpoint.address import open as open_store
from plait.graph.compiled import CompiledGraph
from plait.serve.app import ServeConfig, create_app

DELTAS = ["The", " answer", " is", " that", " a", " durable", " graph", " keeps", " every", " step", ","]
DELTAS += [" so", " a", " crash", " loses", " nothing", " it", " has", " done", "."]
"""The chat node's answer, twenty deltas (the same list as LangGraph's side)."""


class Count(TypedDict):
    n: Annotated[int, Sum()]


async def _one(state: Any) -> dict[str, Any]:
    return {"n": 1}


async def _step(state: Any) -> Command:
    return Command(update={"n": 1}, goto=END if state["n"] + 1 >= 10 else "step")


class Chat(TypedDict):
    messages: Annotated[list[dict[str, Any]], AppendMessages()]


async def _reply(state: Any, ctx: NodeContext) -> dict[str, Any]:
    return {"messages": [await ctx.astream_message(DELTAS)]}


def _graphs() -> dict[str, CompiledGraph]:
    one = Graph(Count)
    one.add_node("one", _one)
    one.add_edge(START, "one")
    one.add_edge("one", END)
    steps = Graph(Count)
    steps.add_node("step", _step, destinations=["step", END])
    steps.add_edge(START, "step")
    chat = Graph(Chat)
    chat.add_node("reply", _reply)
    chat.add_edge(START, "reply")
    chat.add_edge("reply", END)
    return {"one": one.compile(name="one"), "steps": steps.compile(name="steps"), "chat": chat.compile(name="chat")}


GRAPHS = _graphs()
"""The three graphs, by the names both servers give them."""
one, steps, chat = GRAPHS["one"], GRAPHS["steps"], GRAPHS["chat"]
"""What ``plait serve --graph one=benchmarks._serve_plait:one ...`` names."""


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks._serve_plait")
    p.add_argument("db")
    p.add_argument("port", type=int)
    p.add_argument("--schema", help="the PostgreSQL schema of the store (with a postgresql:// DB)")
    p.add_argument("--profile", help="write a cProfile .pstats file of every thread here on exit")
    a = p.parse_args()
    store = open_store(a.db, schema=a.schema) if a.schema else a.db
    app = create_app(store, GRAPHS, config=ServeConfig(studio=False))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=a.port, log_level="warning"))
    if not a.profile:
        server.run()
        return
    from benchmarks._profile import AllThreads

    profiler = AllThreads()
    # uvicorn stops on SIGTERM or SIGINT and then raises the signal again under the handler
    # found before it started: this one, so that the process lives on to write the profile.
    signal.signal(signal.SIGTERM, lambda *_: None)
    with profiler.running():
        server.run()
    print(profiler.report(Path(a.profile)), file=sys.stderr)


if __name__ == "__main__":
    main()
