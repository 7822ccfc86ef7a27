"""A run on an event loop that is not asyncio's own (uvloop, which ``plait serve`` and many
servers run on): what a sync node sends from its worker thread reaches the stream, and the
hop back to the loop happens once (a loop that does not record its thread once made the hop
repeat forever)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plait import START, AppendList, Graph, NodeContext, SqliteCheckpointer, StateSchema
from plait._sync import on_loop_thread

uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed (it does not run on Windows)")


def _graph() -> Graph:
    def talk(state: Any, ctx: NodeContext) -> Any:  # takes ctx: runs in a worker thread
        ctx.emit({"said": "first"})
        ctx.emit({"said": "second"})
        return {"log": ["talked"]}

    g = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("talk", talk)
    return g.add_edge(START, "talk")


def test_a_sync_nodes_custom_events_reach_a_stream_on_uvloop(tmp_path: Any) -> None:
    async def main() -> list[tuple[str, Any]]:
        cp = SqliteCheckpointer(tmp_path / "runs.db")
        try:
            app = _graph().compile(cp)
            return [item async for item in app.astream({}, mode=["custom", "values"], thread_id="t")]
        finally:
            await cp.aclose()

    items = uvloop.run(main())
    assert [data for mode, data in items if mode == "custom"] == [{"said": "first"}, {"said": "second"}]
    assert [data for mode, data in items if mode == "values"][-1] == {"log": ["talked"]}


def test_the_loops_own_thread_is_on_it_and_another_thread_is_not() -> None:
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        elsewhere = await asyncio.to_thread(on_loop_thread, loop)
        return on_loop_thread(loop), elsewhere

    assert uvloop.run(main()) == (True, False)
    assert asyncio.run(main()) == (True, False)
