"""PostgreSQL restarted (as a crash would: ``pg_ctl stop -m immediate``) under running `plait
worker` processes: they reconnect, nothing half-written is read back, every run finishes as an
uninterrupted one. On a private server (the crash tests' :class:`PrivatePostgres`), never the
shared one."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

from plait._sync import run_sync
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.runs import Runs

from . import _run_flows as flows
from ._runs_support import WorkerProcess, ledger_lines, plait_worker, started, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _crash_module() -> object:
    path = Path(__file__).resolve().parents[1] / "crash" / "test_crash_postgres_restart.py"
    spec = importlib.util.spec_from_file_location("_plait_private_postgres", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


private_postgres = _crash_module().private_postgres  # type: ignore[attr-defined]
"""The crash tests' fixture: a throwaway cluster of this machine's binaries, on its own port."""

STEPS = 12


def test_workers_reconnect_after_a_postgres_restart_and_every_run_finishes(
    private_postgres: object, tmp_path: Path
) -> None:
    dsn: str = private_postgres.dsn  # type: ignore[attr-defined]
    runs = Runs(dsn)
    runs.migrate()
    runs.close()
    ledger = tmp_path / "ledger"
    procs: list[WorkerProcess] = []
    try:
        for i in range(2):
            log = tmp_path / f"worker-{i}.log"
            proc = plait_worker(dsn, "public", log=log, env={"PLAIT_TEST_LEDGER": str(ledger)})
            procs.append(proc)
            wait_for(functools.partial(started, log), 30, "the workers to start")
        with Runs(dsn) as runs:
            ids = [
                runs.submit(flows.name("steps"), {"steps": STEPS, "pause": 0.05, "tag": f"p{k}"}, thread_id=f"pg{k}")
                for k in range(24)  # more than the workers' 8 slots: some start after the restart
            ]
            wait_for(lambda: len(ledger_lines(ledger)) >= 20, 30, "20 node starts")
            assert not all(r.done for r in runs.list(limit=None))
            private_postgres.restart()  # type: ignore[attr-defined]
        with Runs(dsn) as runs:  # a new pool: the old one's connections died with the server
            done = [runs.join(run_id, timeout=30) for run_id in ids]
        assert [r.status for r in done] == ["success"] * len(ids), [(r.status, r.error) for r in done]
        assert all(p.poll() is None for p in procs)  # the workers lived through it
        store = PostgresCheckpointer(dsn)
        for k, run in enumerate(done):
            assert run.output["log"] == [f"p{k}:{i}" for i in range(STEPS)]
            history = run_sync(store.ahistory(f"pg{k}"))
            loop = [cp.step for cp in history if cp.metadata.get("source") == "loop"]
            assert loop == list(range(STEPS, 0, -1))
        store.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
