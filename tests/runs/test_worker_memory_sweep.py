"""A worker sweeps the expired memory items of its database while it runs: at start and then at
the interval its graphs' stores ask for (or ``memory_sweep_minutes``), and stops the sweeper
when it stops."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any

from plait import END, START, Graph, MemoryCheckpointer, StateSchema, Store
from plait.checkpoint.address import open_postgres
from plait.runs import Worker

from ._runs_support import FAST


def graph(minutes: int | None) -> Any:
    builder = Graph(StateSchema.builder().add_lww("n", default=0).build())
    builder.add_node("a", lambda s: {"n": 1}).add_edge(START, "a").add_edge("a", END)
    if minutes is None:
        return builder.compile()
    local = MemoryCheckpointer()  # the worker binds it to its own: the store follows with its options
    return builder.compile(checkpointer=local, store=Store(local, ttl={"sweep_interval_minutes": minutes}))


def test_a_worker_sweeps_its_databases_expired_memory(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db

    async def go() -> None:
        checkpointer = open_postgres(dsn, schema=schema)
        await checkpointer.asetup()
        hour_ago = time.time() - 3600
        past = Store(checkpointer, clock=lambda: hour_ago)
        await past.aput(("users", "u1"), "old", {"x": 1}, ttl=1)  # expired 59 minutes ago
        await past.aput(("users", "u1"), "kept", {"x": 2})
        worker = Worker(dsn, {"plain": graph(None), "often": graph(7), "rarely": graph(90)}, schema=schema, settings=FAST)
        task = asyncio.create_task(worker.arun(install_signal_handlers=False))
        try:
            await asyncio.wait_for(worker.started.wait(), 30)
            sweeper = worker.memory_sweeper
            assert sweeper is not None and sweeper.interval == 7 * 60  # the shortest its graphs ask for
            await asyncio.wait_for(sweeper.wait_sweeps(1), 30)
            assert sweeper.swept == 1 and sweeper.failures == 0
            assert [i.key for i in await past.asearch((), refresh_ttl=False)] == ["kept"]
        finally:
            worker.stop()
            worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
            await checkpointer.aclose()
        assert not sweeper.running

        settings = dataclasses.replace(FAST, memory_sweep_minutes=0.5)
        worker = Worker(dsn, {"often": graph(7)}, schema=schema, settings=settings)
        task = asyncio.create_task(worker.arun(install_signal_handlers=False))
        try:
            await asyncio.wait_for(worker.started.wait(), 30)
            assert worker.memory_sweeper is not None and worker.memory_sweeper.interval == 30.0
        finally:
            worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)

    asyncio.run(go())
