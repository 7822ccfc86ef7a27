"""Helpers of the runs tests: workers in this process or as `plait worker` subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from plait.runs import Worker, WorkerSettings

from . import _run_flows as flows

FAST = WorkerSettings(concurrency=4, heartbeat=0.5, stalled_after=2.0, sweep_every=1, lease_ttl=3.0, poll=0.5)
"""Short recovery settings: a dead worker's runs move on within a few seconds."""

GRAPHS = ("steps", "single", "held", "asking", "failing")


class WorkerProcess(subprocess.Popen[bytes]):
    """A `plait worker` subprocess, and the file its output goes to (what tests watch)."""

    log: Path


@contextlib.asynccontextmanager
async def worker_in_process(
    dsn: str, schema: str, graphs: list[str] | None = None, settings: WorkerSettings = FAST, name: str | None = None
) -> AsyncIterator[Worker]:
    """A worker running in this event loop until the block ends."""
    graphs = graphs or [flows.name(g) for g in GRAPHS]
    worker = Worker(dsn, graphs, schema=schema, settings=settings, name=name)
    task = asyncio.create_task(worker.arun(install_signal_handlers=False))
    started = asyncio.create_task(worker.started.wait())
    await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    try:
        yield worker
    finally:
        worker.stop()
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


def plait_worker(
    dsn: str, schema: str, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None, log: Path
) -> WorkerProcess:
    """A `plait worker` process serving the test graphs, short recovery settings."""
    command = [sys.executable, "-m", "plait", "worker", "--db", dsn, "--schema", schema]
    for g in GRAPHS:
        command += ["--graph", flows.name(g)]
    command += ["--heartbeat", "0.5", "--stalled-after", "2", "--sweep-every", "1", "--lease-ttl", "3", "--poll", "0.5"]
    command += list(args)
    full_env = {**os.environ, **(env or {})}
    with log.open("ab") as out:  # the child keeps its own descriptor
        proc = WorkerProcess(command, stdout=out, stderr=subprocess.STDOUT, env=full_env)
    proc.log = log
    return proc


def wait_for(predicate: Callable[[], object], timeout: float, what: str, pause: float = 0.005) -> None:
    """Poll ``predicate`` (a cheap check: a file read, a query) until true, or fail naming ``what``."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(pause)


def started(log: Path) -> bool:
    """Whether the `plait worker` writing ``log`` is registered and fetching jobs."""
    return log.exists() and " started on " in log.read_text(errors="replace")


def ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
