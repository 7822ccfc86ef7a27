"""`plait worker` processes on one PostgreSQL: SIGTERM puts a run back at a super-step boundary,
a second SIGTERM stops at once, and SIGKILLs at seeded random moments lose no run and re-run
no committed step. Driven by what the workers report (their log, the node ledger), not by sleeps."""

from __future__ import annotations

import functools
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plait._sync import run_sync
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.runs import Runs

from . import _run_flows as flows
from ._runs_support import WorkerProcess, ledger_lines, started, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

Start = Callable[..., WorkerProcess]

SEED = int(os.environ.get("PLAIT_TEST_SEED", "20261201"))
KILLS = 22


def ready(*procs: WorkerProcess) -> None:
    for proc in procs:
        wait_for(functools.partial(started, proc.log), 30, f"worker {proc.pid} to start")


def check_thread(store: PostgresCheckpointer, thread: str, tag: str, steps: int) -> None:
    """The thread holds exactly an uninterrupted run's checkpoints: one per step, none twice."""
    history = run_sync(store.ahistory(thread))
    loop = [cp for cp in history if cp.metadata.get("source") == "loop"]
    assert [cp.step for cp in loop] == list(range(steps, 0, -1)), [cp.step for cp in history]
    assert history[0].values["log"] == [f"{tag}:{i}" for i in range(steps)]


@pytest.mark.parametrize("twice", [False, True], ids=["sigterm", "second-sigterm"])
def test_sigterm_puts_the_run_back_and_another_worker_finishes_it(
    runs_db: tuple[str, str], workers: Start, tmp_path: Path, twice: bool
) -> None:
    dsn, schema = runs_db
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    env = {"PLAIT_TEST_LEDGER": str(ledger), "PLAIT_TEST_GATE": str(gate)}
    first = workers(env=env)
    ready(first)
    with Runs(dsn, schema=schema) as runs:
        run_id = runs.submit(
            flows.name("steps"), {"steps": 30, "pause": 0.05, "tag": "t"}, thread_id="term", stream_mode="updates"
        )
        wait_for(lambda: len(ledger_lines(ledger)) >= 4, 30, "the fourth step to start (it waits at the gate)")
        second = workers(env=env)
        ready(second)
        first.send_signal(signal.SIGTERM)
        if twice:
            first.send_signal(signal.SIGTERM)
        gate.touch()  # the step in flight may finish now: the run cannot have ended before the signal
        assert first.wait(20) == 0
        run = runs.join(run_id, timeout=60)
        stream = list(runs.stream(run_id, timeout=30))
    # attempts: 2, or more when the other worker found the thread still leased by the stopping
    # one (its lease is given back as the run stops) and tried again a moment later
    assert run.status == "success" and run.attempts >= 2, run
    assert run.output["log"] == [f"t:{i}" for i in range(30)]
    pids = [line.split(":")[2] for line in ledger_lines(ledger)]
    assert {pids[0], pids[-1]} == {str(first.pid), str(second.pid)}
    steps = [line.rsplit(":", 1)[0] for line in ledger_lines(ledger)]
    rerun = len(steps) - len(set(steps))
    assert rerun <= (1 if twice else 0), steps  # a boundary stop re-runs nothing; a hard stop the step in flight
    # one stream across the attempts: the second numbers its items on from the first's, losing none
    statuses = [i["data"]["status"] for i in stream if i["mode"] == "status"]
    assert statuses[0] == "running" and statuses[-1] == "success" and "pending" in statuses, statuses
    attempts = [i["data"]["attempt"] for i in stream if i["mode"] == "status" and i["data"]["status"] == "running"]
    assert attempts == sorted(attempts) and len(attempts) == run.attempts, attempts
    updated = {x for i in stream if i["mode"] == "updates" for x in i["data"]["step"]["log"]}
    assert updated == {f"t:{i}" for i in range(30)}, sorted(updated)
    store = PostgresCheckpointer(dsn, schema=schema)
    check_thread(store, "term", "t", 30)
    # each step names the worker and job that ran it, and a later attempt says which it was
    steps_by = [cp.metadata["owner"] for cp in reversed(run_sync(store.ahistory("term"))) if cp.step > 0]
    store.close()
    assert "/job-" in steps_by[0] and "(attempt" not in steps_by[0], steps_by[0]
    assert steps_by[-1].endswith(f"(attempt {run.attempts})"), steps_by[-1]


def test_sigkill_at_random_moments_loses_no_run_and_reruns_no_committed_step(
    runs_db: tuple[str, str], workers: Start, tmp_path: Path
) -> None:
    dsn, schema = runs_db
    rng = random.Random(SEED)
    ledger = tmp_path / "ledger"
    env = {"PLAIT_TEST_LEDGER": str(ledger)}
    live = [workers(env=env) for _ in range(4)]
    ready(*live)
    steps = 6
    submitted: list[tuple[str, str]] = []
    with Runs(dsn, schema=schema) as runs:

        def submit(n: int) -> None:
            for _ in range(n):
                k = len(submitted)
                tag = f"r{k}"
                run_id = runs.submit(
                    flows.name("steps"), {"steps": steps, "pause": 0.04, "tag": tag}, thread_id=f"kill-{k}"
                )
                submitted.append((run_id, tag))

        submit(40)
        kills: list[dict[str, Any]] = []
        seen = len(ledger_lines(ledger))
        while len(kills) < KILLS:
            wanted = seen + rng.randint(1, 8)
            checked = [time.monotonic()]

            def progressed(wanted: int = wanted, checked: list[float] = checked) -> bool:
                if len(ledger_lines(ledger)) >= wanted:
                    return True
                if time.monotonic() - checked[0] > 0.5:  # keep work coming while the kills go on
                    checked[0] = time.monotonic()
                    if not runs.list(status="pending", limit=1) and not runs.list(status="running", limit=1):
                        submit(20)
                return False

            wait_for(progressed, 60, f"{wanted} node starts")
            lines = ledger_lines(ledger)
            seen = len(lines)
            # the victim: a worker that is up (one starting is left to start), most often the one
            # that just started a node, so that a step is in flight; one at least stays up
            wait_for(lambda: sum(started(p.log) for p in live) >= 2, 30, "two workers up")
            up = [p for p in live if started(p.log)]
            last = next((p for p in up if p.pid == int(lines[-1].split(":")[2])), None)
            victim = last if last is not None and rng.random() < 0.6 else rng.choice(up)
            victim.kill()
            victim.wait(10)
            live.remove(victim)
            kills.append({"pid": victim.pid, "after": seen})
            live.append(workers(env=env))
        done = [runs.join(run_id, timeout=90) for run_id, _ in submitted]
    assert len(kills) >= 20
    bad = [(r.run_id, r.status, r.error) for r in done if r.status != "success"]
    assert not bad, bad
    assert any(r.attempts > 1 for r in done)  # some runs were resumed by another worker
    store = PostgresCheckpointer(dsn, schema=schema)
    for run, (_, tag) in zip(done, submitted, strict=True):
        assert run.output["log"] == [f"{tag}:{i}" for i in range(steps)]
        check_thread(store, run.thread_id, tag, steps)
    store.close()
