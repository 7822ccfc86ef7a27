"""The memory store and its step commit together: prove it with SIGKILLs.

A loop graph whose workers each save a memory (``ctx.store.put``) and whose reduce updates
one memory read-modify-write runs in a child process (see crash_child.py, mode
``memory``) that is SIGKILLed again and again at points drawn (seeded) among the events it
reports: a node starting, a commit returned, or a random moment after a node started.
After every kill, and at the end, the memory must be exactly what the committed state says
its steps wrote (``memory_agrees``): no memory of a step that is not committed (it would
show before its step), none missing from a committed step, and the reduce's list holding
each committed round once (a memory applied twice would hold one twice). At least
KILLS_PER_BACKEND kills on SQLite and on PostgreSQL; threads alternate sync and async
durability.

Set PLAIT_CRASH_SEED to replay a seed.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from plait import thaw
from plait._sync import run_sync

if TYPE_CHECKING:  # for the annotations only: at run time pytest gives them as fixtures
    from ._harness import Launcher, Store

pytestmark = pytest.mark.slow

KILLS_PER_BACKEND = 100
MAX_KILLS_PER_THREAD = 25
"""After this many kills a thread's next child runs to its end unharmed."""


def _seed() -> int:
    env = os.environ.get("PLAIT_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


def test_memory_always_matches_the_committed_steps_across_sigkills(
    crash_child: ModuleType, store: Store, launcher: Launcher, tmp_path: Path
) -> None:
    if store.backend == "file":
        pytest.skip("the file backend keeps no memory store (it refuses one: see FileCheckpointer)")
    seed = _seed()
    rng = random.Random(seed)
    rounds = crash_child.MEMORY_ROUNDS
    last_step = 3 * rounds  # plan, workers, reduce per round: the steps a run goes through
    reader = store.open(reader=True)
    run_sync(reader.asetup())  # (the first child would; the reader reads before it runs)
    kills = threads = 0
    kinds: dict[str, int] = {}
    try:
        while kills < KILLS_PER_BACKEND:
            thread = f"m{threads}"
            durability = ("sync", "async")[threads % 2]
            threads += 1
            base = {
                **store.child_args(),
                "mode": "memory",
                "thread": thread,
                "ledger": str(tmp_path / f"{thread}.ledger"),
                "result": str(tmp_path / f"{thread}.json"),
                "durability": durability,
            }
            fresh = True
            for _ in range(MAX_KILLS_PER_THREAD):
                head = run_sync(reader.aget(thread))
                at_step = head.step if head is not None else 0
                step = rng.randint(at_step, min(at_step + 4, last_step))
                kind = rng.choice(("node", "commit", "inside"))
                args = {**base, "fresh": fresh}
                if kind == "commit":
                    outcome = launcher.run(args, crash_child.At(kind="commit", step=step))
                elif kind == "node":
                    outcome = launcher.run(args, crash_child.At(kind="node", step=step))
                else:  # a moment inside the step: a few ms after a task of it started
                    outcome = launcher.run(
                        args,
                        crash_child.At(kind="node", step=step),
                        delay=rng.uniform(0.0, 0.004),
                        at_latest=crash_child.At(kind="node", step=step + 1),
                    )
                if outcome.killed:
                    kills += 1
                    kinds[kind] = kinds.get(kind, 0) + 1
                else:
                    assert outcome.exit_code == 0, f"seed {seed}: {outcome.describe()}"
                store.settle()
                head = run_sync(reader.aget(thread))
                if head is not None:
                    fresh = False
                    # the law, after every kill: memory is what the committed state says
                    crash_child.memory_agrees(head.values, reader.store, thread)
                if outcome.exit_code == 0:
                    break
            else:
                outcome = launcher.run({**base, "fresh": fresh})
                assert outcome.exit_code == 0, f"seed {seed}: {outcome.describe()}"
            out = json.loads(Path(base["result"]).read_text())
            assert thaw(out["rounds"]) == list(range(rounds)), f"seed {seed}: {out}"
            head = run_sync(reader.aget(thread))
            assert head is not None and not head.next_tasks
            crash_child.memory_agrees(head.values, reader.store, thread)
            assert len(reader.store.search(("work", thread), limit=1000)) == 3 * rounds
    finally:
        run_sync(reader.aclose())
    assert kills >= KILLS_PER_BACKEND, f"seed {seed}: {kills} kills ({kinds}) on {threads} threads"
