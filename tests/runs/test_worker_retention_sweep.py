"""A worker sweeps its database by the retention policy while it runs (first at start, then
every ``retention_sweep`` seconds), runs no sweeper with ``retention_sweep=0``, and stops it
when it stops; ``plait worker --retention-sweep`` refuses a negative interval."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest

from plait import Retention
from plait.checkpoint.address import open_postgres
from plait.cli import EXIT_USAGE, main
from plait.runs import Worker

from ._runs_support import FAST
from .test_worker_memory_sweep import graph


def test_a_worker_sweeps_by_the_stored_policy(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db

    async def go() -> None:
        checkpointer = open_postgres(dsn, schema=schema)
        await checkpointer.asetup()
        await graph(None).bind(checkpointer=checkpointer).ainvoke({}, thread_id="done")
        await checkpointer.aset_stored_retention(Retention(after=1e-6))  # every thread written before is idle
        worker = Worker(
            dsn, {"plain": graph(None)}, schema=schema, settings=dataclasses.replace(FAST, retention_sweep=600)
        )
        task = asyncio.create_task(worker.arun(install_signal_handlers=False))
        try:
            await asyncio.wait_for(worker.started.wait(), 30)
            sweeper = worker.retention_sweeper
            assert sweeper is not None and sweeper.interval == 600
            await asyncio.wait_for(sweeper.wait_sweeps(1), 30)
            assert sweeper.failures == 0 and sweeper.last_report is not None
            assert sweeper.last_report.deleted == (("", "done"),)
            assert await checkpointer.alist_threads() == []
        finally:
            worker.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
        assert not sweeper.running

        off = Worker(dsn, {"plain": graph(None)}, schema=schema, settings=dataclasses.replace(FAST, retention_sweep=0))
        task = asyncio.create_task(off.arun(install_signal_handlers=False))
        try:
            await asyncio.wait_for(off.started.wait(), 30)
            assert off.retention_sweeper is None
        finally:
            off.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
            await checkpointer.aclose()

    asyncio.run(go())


def test_the_worker_refuses_a_negative_retention_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("procrastinate")
    argv = ["worker", "--db", "postgresql://nobody@127.0.0.1:1/none", "--graph", "x.py:g", "--retention-sweep", "-1"]
    assert main(argv) == EXIT_USAGE
    assert "--retention-sweep takes seconds (0: no retention sweep), got -1" in capsys.readouterr().err
