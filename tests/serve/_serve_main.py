"""``python -m tests.serve._serve_main DB PORT GATE_DIR``: a ``plait serve`` in a process of its
own, for the tests that kill it. Its ``slow`` graph counts to ten; at five it waits for the
file ``GATE_DIR/go`` (so a test can kill the server while a run is mid-way, by an event,
not a timer), and every step streams a custom event."""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Annotated, Any, TypedDict

import uvicorn

from plait import END, START, Command, Graph, NodeContext, Sum
from plait.serve.app import create_app


class Count(TypedDict):
    n: Annotated[int, Sum()]


def slow_graph(gate_dir: pathlib.Path) -> Any:
    def step(state: Any, ctx: NodeContext) -> Command:
        ctx.emit({"at": state["n"]})
        if state["n"] == 5:
            (gate_dir / "waiting").touch()
            while not (gate_dir / "go").exists():
                time.sleep(0.01)
        return Command(update={"n": 1}, goto=END if state["n"] + 1 >= 10 else "step")

    g = Graph(Count)
    g.add_node("step", step, destinations=["step", END])
    g.add_edge(START, "step")
    return g.compile(name="slow")


def main() -> None:
    db, port, gate_dir = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
    app = create_app(db, {"slow": slow_graph(gate_dir)})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
