"""`plait serve` serves an entrypoint as the graph it runs as (an assistant like any other)."""

from __future__ import annotations

from plait import MemoryCheckpointer, entrypoint
from plait.serve.app import _served


def test_an_entrypoint_is_served_as_its_graph() -> None:
    @entrypoint()
    def echo(x: str) -> str:
        return x

    cp = MemoryCheckpointer()
    served = _served({"echo": echo}, cp, None)
    assert served == {"echo": echo.graph}
    assert served["echo"].invoke({"input": "hi"})["output"] == "hi"
