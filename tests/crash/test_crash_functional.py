"""SIGKILL an entrypoint running 50 tasks at random moments, on SQLite and PostgreSQL, resume
it each time in a new process, and no task whose result was recorded runs again.

The moments are events (seeded choices): a task starting, a task done but its result not yet
recorded, the entrypoint having read a task's result (recorded by then). The child waits at
the chosen event (see func_child.py) and is killed there, so no kill depends on timing.
After each kill the test reads the store: the tasks whose results it holds, and how long the
ledger was then. At the end no such task may have a ``start`` line after that point, every
task whose result the entrypoint read was recorded, and the result is the uninterrupted one.
Set PLAIT_CRASH_SEED to replay a seed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait import Checkpointer
from plait._sync import run_sync

pytestmark = pytest.mark.slow

CHILD = Path(__file__).resolve().parent / "func_child.py"
TASKS = 50
KILLS = 12
"""At most this many kills per thread (fewer when the run reaches its end first)."""
MIN_KILLS = 6
HANG_LIMIT = 60.0


def _seed() -> int:
    env = os.environ.get("PLAIT_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    if request.param == "sqlite":
        yield {"backend": "sqlite", "path": str(tmp_path / "func.sqlite")}
    else:
        yield {
            "backend": "postgres",
            "dsn": request.getfixturevalue("postgres_dsn"),
            "schema": request.getfixturevalue("postgres_schema"),
        }


def _open(args: dict[str, Any]) -> Checkpointer:
    """The child's store, opened as the child opens it."""
    spec = importlib.util.spec_from_file_location("plait_func_child", CHILD)
    assert spec is not None and spec.loader is not None
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    saver: Checkpointer = child.open_store(args)
    return saver


def _lines(ledger: Path) -> list[tuple[int, str]]:
    """(byte offset, line) of each line of the ledger."""
    out, offset = [], 0
    for raw in (ledger.read_bytes() if ledger.exists() else b"").splitlines(keepends=True):
        assert raw.endswith(b"\n"), f"torn ledger line {raw!r}"
        out.append((offset, raw.decode().strip()))
        offset += len(raw)
    return out


def _run_child(args: dict[str, Any], ledger: Path, hold: str | None) -> bool:
    """Run a child; with ``hold``, SIGKILL it at that event. True when it ran to the end."""
    env = {**os.environ, "PYTHONPATH": str(CHILD.parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, str(CHILD), json.dumps({**args, "hold": hold})], env=env)
    deadline = time.monotonic() + HANG_LIMIT
    try:
        while True:
            if hold is not None and any(line == f"hold {hold}" for _, line in _lines(ledger)):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return False
            code = proc.poll()
            if code is not None:
                assert code == 0, f"the child failed (exit {code}) waiting for {hold!r}"
                return True
            assert time.monotonic() < deadline, f"the child hung waiting for {hold!r}"
            time.sleep(0.005)  # (polling the ledger for the event; the child waits there)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _recorded(saver: Checkpointer, thread: str) -> tuple[set[int], bool]:
    """The tasks whose results the store holds, and whether the run finished."""
    head = run_sync(saver.aget(thread))
    if head is None:
        return set(), False
    if not head.next_tasks:
        return set(range(TASKS)), True
    values = {p.value["value"] // 2 for p in head.pending_writes if p.kind == "effect"}
    return values, False


def test_no_recorded_task_runs_again_after_sigkills(backend: dict[str, Any], tmp_path: Path) -> None:
    seed = _seed()
    rng = random.Random(seed)
    ledger, result = tmp_path / "ledger", tmp_path / "result.json"
    args = {**backend, "thread": "f", "ledger": str(ledger), "result": str(result)}
    saver = _open(args)
    run_sync(saver.asetup())
    recorded_at: dict[int, int] = {}  # task -> ledger size when the store first held its result
    kills, started = 0, False
    try:
        while kills < KILLS:
            passed = {line for _, line in _lines(ledger)}
            choices = [
                f"{kind} {i}" for i in range(TASKS) for kind in ("start", "done", "seen") if f"{kind} {i}" not in passed
            ]
            if not choices:
                break
            hold = rng.choice(choices[:12])  # an event a few tasks ahead, as a crash finds a run
            finished = _run_child({**args, "start": not started}, ledger, hold)
            started = True
            assert not finished, f"seed {seed}: the run ended before reaching {hold!r}"
            kills += 1
            size = ledger.stat().st_size
            recorded, _ = _recorded(saver, "f")
            for i in recorded:
                recorded_at.setdefault(i, size)
            seen = {int(line.split()[1]) for _, line in _lines(ledger) if line.startswith("seen ")}
            assert seen <= recorded, f"seed {seed}: results read but not recorded: {sorted(seen - recorded)}"
        assert _run_child({**args, "start": not started}, ledger, None)
        assert json.loads(result.read_text()) == [2 * i for i in range(TASKS)]
        again = [
            (i, offset)
            for offset, line in _lines(ledger)
            if line.startswith("start ") and (i := int(line.split()[1])) in recorded_at and offset >= recorded_at[i]
        ]
        assert not again, f"seed {seed}: recorded tasks ran again: {again}"
        starts = [line for _, line in _lines(ledger) if line.startswith("start ")]
        assert set(starts) == {f"start {i}" for i in range(TASKS)}
        assert kills >= MIN_KILLS and len(recorded_at) > 0, f"seed {seed}: {kills} kills, {len(recorded_at)} recorded"
    finally:
        run_sync(saver.aclose())
