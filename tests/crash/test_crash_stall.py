"""A run that stalls: its process stopped (SIGSTOP) in the middle of a node, as a GC pause, a
frozen VM or a debugger stops a worker, for longer than its lease lasts, then continued
(SIGCONT). With nobody taking the thread over meanwhile, it must finish as if nothing had
happened. (Whether another run may take a stalled run's thread over, and what the stalled
run may still write then, is the business of lease fencing; its tests use the same harness,
``launcher.stalled``.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from plait import thaw
from plait._sync import run_sync

if TYPE_CHECKING:  # for the annotations only: at run time pytest gives them as fixtures
    from ._harness import Launcher, Reference, Store

pytestmark = pytest.mark.slow

STALL_STEP = 4
"""The stalled node, w1, starts from this step's checkpoint (the second round's fan-out)."""
STALL_LEASES = 3
"""The child stays stopped this many lease lifetimes: its lease has lapsed when it goes on."""


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_run_stopped_inside_a_node_and_continued_finishes_and_reads_back(
    crash_child: ModuleType,
    store: Store,
    launcher: Launcher,
    reference: Reference,
    tmp_path: Path,
    durability: str,
) -> None:
    thread, ledger, result = "stalled", tmp_path / "stalled.ledger", tmp_path / "stalled.json"
    args = {
        **store.child_args(),
        "thread": thread,
        "ledger": str(ledger),
        "result": str(result),
        "fresh": True,
        "durability": durability,
    }
    reader = store.open(reader=True)
    run_sync(reader.asetup())
    try:
        with launcher.stalled(args, at=crash_child.At(kind="node", step=STALL_STEP, node="w1")) as stall:
            ledger_size = ledger.stat().st_size
            # Another process reads the thread while the run is stopped: what was committed
            # reads back as the uninterrupted run's, and the stalled task has no result yet.
            head = run_sync(reader.aget(thread))
            assert head is not None
            assert head.step == STALL_STEP if durability == "sync" else head.step <= STALL_STEP
            for cp in run_sync(reader.ahistory(thread)):
                assert thaw(cp.values) == reference.by_step[cp.step], f"step {cp.step} while stopped"
            if head.step == STALL_STEP:
                assert (stall.event.task, "result") not in {(p.task_id, p.kind) for p in head.pending_writes}
            left = STALL_LEASES * crash_child.LEASE_TTL - (time.monotonic() - stall.stopped_at)
            time.sleep(max(0.0, left))  # the stall itself: no event ends it, the test does
            assert ledger.stat().st_size == ledger_size, "the stopped child went on (its sibling tasks did)"

        outcome = stall.outcome
        assert outcome is not None and outcome.exit_code == 0, f"after the stall: {outcome}"
        assert stall.stopped_for >= STALL_LEASES * crash_child.LEASE_TTL
        after = stall.reported_after
        assert [(e.kind, e.node) for e in after if e.task == stall.event.task] == [("effect", "w1"), ("recorded", "w1")]
        committed = sorted(s for e in outcome.events for s in e.steps)
        assert committed == list(range(reference.checkpoints)), "each checkpoint committed once"
        assert {s for e in after for s in e.steps} >= set(range(STALL_STEP + 1, reference.checkpoints))
        assert after[-1].kind == "done"
        reference.check_thread(reader, thread, f"{durability}, stalled at {stall.event}")
        assert json.loads(result.read_text()) == reference.final
        starts = [line for line in ledger.read_text().splitlines() if line.startswith("start ")]
        assert len(starts) == len(set(starts)), "a task ran twice though nothing failed"
    finally:
        run_sync(reader.aclose())
