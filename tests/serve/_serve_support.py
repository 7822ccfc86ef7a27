"""A real ``plait serve`` on a loopback port, for the SDK tests: uvicorn in a thread of the
test process, over a store and the small graphs below."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

import uvicorn
from fastapi import FastAPI

from plait import END, START, AppendMessages, Command, Graph, NodeContext, Sum, interrupt
from plait.checkpoint.base import Checkpointer
from plait.graph.compiled import CompiledGraph
from plait.serve.app import ServeConfig, create_app

__all__ = ["APPS", "ENTERED", "GATES", "chat_graph", "nested_graph", "served", "steps_graph"]

GATES: dict[str, threading.Event] = {}
"""Named gates a node waits at (set by a test), so that a test can hold a run mid-way."""
ENTERED: dict[str, threading.Event] = {}
"""Set when a run reaches the gate of that name (a test waits for it before acting)."""
APPS: dict[str, FastAPI] = {}
"""The app served at each base URL while it is served (a test reaches its parts, the crons)."""


class Chat(TypedDict):
    messages: Annotated[list[dict[str, Any]], AppendMessages()]
    turns: Annotated[int, Sum()]


def _reply(state: Any, ctx: NodeContext) -> dict[str, Any]:
    """Streams its answer token by token, as a model would."""
    text = str(state["messages"][-1].get("content", ""))
    answer = ctx.stream_message(["echo", ": ", *text.split(" ")[:1], *(f" {w}" for w in text.split(" ")[1:])])
    return {"messages": [answer], "turns": 1}


def _approve(state: Any) -> dict[str, Any]:
    answer = interrupt({"question": "send it?"})
    return {"messages": [{"role": "assistant", "content": f"approved: {answer}"}]}


def _gate(state: Any, ctx: NodeContext) -> dict[str, Any]:
    name = str(state["messages"][-1].get("content", ""))
    if name == "fail":
        raise RuntimeError("the gate refused 'fail'")
    gate = GATES.get(name)
    if gate is not None:
        ENTERED.setdefault(name, threading.Event()).set()
        gate.wait(30)
    return {}


def chat_graph() -> CompiledGraph:
    """``gate`` (waits when the message names a gate) -> ``reply`` -> maybe ``approve``."""
    g = Graph(Chat)
    g.add_node("gate", _gate)
    g.add_node("reply", _reply)
    g.add_node("approve", _approve)
    g.add_edge(START, "gate")
    g.add_edge("gate", "reply")
    g.add_conditional_edges(
        "reply",
        lambda s: "approve" if "approve" in str(s["messages"][-1].get("content", "")) else END,
        {"approve": "approve", END: END},
    )
    g.add_edge("approve", END)
    return g.compile(name="chat")


class Count(TypedDict):
    n: Annotated[int, Sum()]


def _step(state: Any) -> Command:
    return Command(update={"n": 1}, goto=END if state["n"] + 1 >= 10 else "step")


def steps_graph() -> CompiledGraph:
    """Ten super-steps of one node."""
    g = Graph(Count)
    g.add_node("step", _step, destinations=["step", END])
    g.add_edge(START, "step")
    return g.compile(name="steps")


def _add_one(state: Any) -> dict[str, Any]:
    return {"n": 1}


def nested_graph() -> CompiledGraph:
    """``inner`` (a subgraph: ``a`` -> ``b``) -> ``fin``, each node adding 1 to ``n``."""
    inner = Graph(Count).add_node("a", _add_one).add_node("b", _add_one)
    inner.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    g = Graph(Count).add_node("inner", inner.compile(name="inner")).add_node("fin", _add_one)
    g.add_edge(START, "inner").add_edge("inner", "fin").add_edge("fin", END)
    return g.compile(name="nested")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(
    store: Checkpointer | str, graphs: dict[str, CompiledGraph] | None = None, config: ServeConfig | None = None
) -> Iterator[str]:
    """The server's base URL while the block runs."""
    graphs = graphs or {"chat": chat_graph(), "steps": steps_graph(), "nested": nested_graph()}
    app = create_app(store, graphs, config=config)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("plait serve did not start")
        time.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    APPS[base] = app
    try:
        yield base
    finally:
        APPS.pop(base, None)
        server.should_exit = True
        thread.join(30)
