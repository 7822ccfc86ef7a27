"""Studio fixtures: a store holding a few threads of a small graph, and the app over it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the Studio needs the studio extra: pip install 'plait[studio]'")

from fastapi.testclient import TestClient  # noqa: E402

from plait import Command, MemoryCheckpointer, PostgresCheckpointer, SqliteCheckpointer  # noqa: E402
from plait.checkpoint.base import Checkpointer  # noqa: E402

from ._studio_support import compiled, make_client  # noqa: E402


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite store with thread ``waiting`` (paused on its interrupt) and ``done`` (finished)."""
    path = str(tmp_path / "studio.db")
    saver = SqliteCheckpointer(path)
    app = compiled(saver)
    app.invoke({"topic": "rivers"}, thread_id="waiting")
    app.invoke({"topic": "lakes"}, thread_id="done")
    app.invoke(Command(resume="yes"), thread_id="done")
    saver.close()
    return path


@pytest.fixture
def saver(db: str) -> Iterator[SqliteCheckpointer]:
    s = SqliteCheckpointer(db)
    yield s
    s.close()


@pytest.fixture
def client(saver: SqliteCheckpointer) -> Iterator[TestClient]:
    with make_client(saver) as c:
        yield c


@pytest.fixture
def bare(saver: SqliteCheckpointer) -> Iterator[TestClient]:
    """The Studio without a graph."""
    with make_client(saver, graphs=False) as c:
        yield c


@pytest.fixture
def queue_db(postgres_dsn: str, postgres_schema: str) -> tuple[str, str]:
    """(dsn, schema) of a fresh schema set up for runs (``plait db migrate``'s work). The sync
    client: it runs on a loop of its own, so that a test's own loop (Playwright's) is no bar."""
    from plait.runs import Runs

    runs = Runs(postgres_dsn, schema=postgres_schema)
    runs.migrate()
    runs.close()
    return postgres_dsn, postgres_schema


UNHURRIED = ("--heartbeat", "2", "--stalled-after", "60", "--lease-ttl", "60")
"""Worker settings for tests that do not kill workers: a busy machine's pause is never taken
for a dead worker (whose run would go back to the queue and run its step again)."""


@pytest.fixture
def queue_worker(queue_db: tuple[str, str], tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``start(env=...)``: a `plait worker` process serving tests/runs' graphs on ``queue_db``,
    started and registered when it returns; killed when the test ends."""
    from ._queue_support import plait_worker, started, wait_for

    procs: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{len(procs)}.log"
        proc = plait_worker(*queue_db, log=log, env=env, args=UNHURRIED)
        procs.append(proc)
        wait_for(lambda: started(log) or proc.poll() is not None, 60, "the worker to start")
        assert proc.poll() is None, log.read_text()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def memory_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """A checkpointer of one backend whose memory holds ``_memory_support.ITEMS``: the
    Memory page's tests run on each backend that keeps memory."""
    from ._memory_support import seed

    cp: Checkpointer
    if request.param == "memory":
        cp = MemoryCheckpointer()
    elif request.param == "sqlite":
        cp = SqliteCheckpointer(str(tmp_path / "memory.db"))
    else:
        cp = PostgresCheckpointer(
            request.getfixturevalue("postgres_dsn"), schema=request.getfixturevalue("postgres_schema")
        )
    cp.setup()
    seed(cp)
    yield cp
    cp.close()
