"""A graph for ``plait worker`` processes in the serve tests: ``talk`` streams a ten-token
answer; at its fifth token it leaves the file ``waiting`` in ``$PLAIT_TEST_GATES`` and waits
for the file ``go`` there (so a test kills its worker mid-answer by an event, not a timer)."""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Iterator
from typing import Any

from plait import END, START, Graph, MessagesState, NodeContext

WORDS = [f"w{i} " for i in range(10)]


def _tokens() -> Iterator[str]:
    gates = pathlib.Path(os.environ["PLAIT_TEST_GATES"])
    for i, word in enumerate(WORDS):
        if i == 5:
            (gates / "waiting").touch()
            while not (gates / "go").exists():
                time.sleep(0.01)
        yield word


def speak(state: Any, ctx: NodeContext) -> dict[str, Any]:
    return {"messages": [ctx.stream_message(_tokens())]}


builder = Graph(MessagesState)
builder.add_node("speak", speak)
builder.add_edge(START, "speak").add_edge("speak", END)
graph = builder.compile(name="talk")
