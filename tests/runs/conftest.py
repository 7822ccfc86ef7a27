"""Fixtures of the runs tests: a fresh Postgres schema set up for runs, and `plait worker`
processes serving it (killed when the test ends)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from plait.runs import Runs

from ._runs_support import WorkerProcess, plait_worker


@pytest.fixture
def runs_db(postgres_dsn: str, postgres_schema: str) -> tuple[str, str]:
    """(dsn, schema) of a schema with the run tables and Procrastinate's applied."""

    async def setup() -> None:
        runs = Runs(postgres_dsn, schema=postgres_schema)
        await runs.amigrate()
        await runs.aclose()

    asyncio.run(setup())
    return postgres_dsn, postgres_schema


@pytest.fixture
def workers(runs_db: tuple[str, str], tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `plait worker` processes; each is killed at the end of the test."""
    started: list[WorkerProcess] = []

    def start(**options: Any) -> WorkerProcess:
        proc = plait_worker(*runs_db, log=tmp_path / f"worker-{len(started)}.log", **options)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
