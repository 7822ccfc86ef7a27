"""A run whose thread was taken over never writes again. Process A runs a thread and is
stopped (SIGSTOP) inside a node, past its lease; process B takes the thread over and runs it;
A is continued (SIGCONT) while B still runs, or after B finished. A must stop at once with
LeaseLostError: nothing of A's is committed after the takeover, A runs no effect once
continued (no card is charged again), B repeats no effect A recorded, and the thread ends
as an uninterrupted run would, B's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from plait._sync import run_sync

if TYPE_CHECKING:  # for the annotations only: at run time pytest gives them as fixtures
    from ._harness import Launcher, Outcome, Reference, Store

pytestmark = pytest.mark.slow

STALL_STEP = 4
"""A is stopped as w1 starts from this step's checkpoint, before w1's effect."""


def _effects(ledger: Path) -> list[str]:
    return [line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("effect ")]


def _lost(outcome: Outcome) -> bool:
    failure = outcome.failure
    return failure is not None and "LeaseLostError" in failure.errors


@pytest.mark.parametrize("continued", ["while the taker runs", "after the taker finished"])
def test_a_stalled_run_whose_thread_was_taken_over_writes_nothing_more(
    crash_child: ModuleType,
    store: Store,
    launcher: Launcher,
    other_launcher: Launcher,
    reference: Reference,
    tmp_path: Path,
    continued: str,
) -> None:
    thread = "taken"
    a_ledger, b_ledger = tmp_path / "a.ledger", tmp_path / "b.ledger"
    base = {**store.child_args(), "thread": thread, "durability": "sync"}
    a_args = {**base, "ledger": str(a_ledger), "result": str(tmp_path / "a.json"), "fresh": True}
    b_args = {**base, "ledger": str(b_ledger), "result": str(tmp_path / "b.json"), "fresh": False}
    reader = store.open(reader=True)
    run_sync(reader.asetup())
    a_outcome: Outcome | None
    try:
        # A's three workers are all held as they start (before their effects), then A is
        # stopped: no task is between checking its lease and running its effect (that window
        # no design closes; ctx.idempotency_key is for it).
        at = crash_child.At(kind="node", step=STALL_STEP, node="w1")
        others = [crash_child.At(kind="node", step=STALL_STEP, node=w) for w in ("w0", "w2")]
        with launcher.stalled(a_args, at=at, also=others) as stall:
            a_effects_before = _effects(a_ledger)
            held_by_a = run_sync(reader.aget_thread(thread))
            assert held_by_a is not None and held_by_a.lease is not None
            # B takes the thread once A's lease has lapsed (A is alive, stopped: it is waited
            # out, not taken over early), and runs it.
            if continued == "while the taker runs":
                with other_launcher.held(
                    b_args, at=crash_child.At(kind="recorded", step=STALL_STEP, node="w1")
                ) as taker:
                    taken = run_sync(reader.aget_thread(thread))
                    assert taken is not None and taken.lease is not None
                    assert taken.lease.token > held_by_a.lease.token, "the taker's lease is a new generation"
                    a_outcome = stall.resume()  # SIGCONT A now, while B holds the thread (at w1's record)
                b_outcome = taker.outcome
            else:
                b_outcome = other_launcher.run(b_args)
        if continued == "after the taker finished":
            a_outcome = stall.outcome

        assert a_outcome is not None and b_outcome is not None
        assert a_outcome.exit_code == 1 and _lost(a_outcome), (
            f"A after the takeover: {a_outcome.describe()}; B: {b_outcome.describe()}"
        )
        late = [e for e in a_outcome.events if e.kind == "commit" and any(s > STALL_STEP for s in e.steps)]
        assert not late, f"A committed steps after the takeover: {late}"
        assert _effects(a_ledger) == a_effects_before, "A ran an effect after it was continued"
        assert b_outcome.exit_code == 0, f"B: {b_outcome.describe()}"
        # B does not repeat an effect A recorded; it does run again one that A's stop cut off
        # between the effect and its record (what ctx.once promises, and no more: pass
        # ctx.idempotency_key to the outside system for those).
        recorded_by_a = {e.task for e in a_outcome.events if e.kind == "recorded"}
        by_b = _effects(b_ledger)
        assert not recorded_by_a & set(by_b), f"B repeated effects A had recorded: {recorded_by_a & set(by_b)}"
        assert len(by_b) == len(set(by_b)), f"B ran an effect twice: {by_b}"
        reference.check_thread(reader, thread, f"taken over, A continued {continued}")
        history = run_sync(reader.ahistory(thread))
        stalled_at = next(cp for cp in history if cp.step == STALL_STEP)
        later = {cp.metadata["run_id"] for cp in history if cp.step > STALL_STEP}
        assert len(later) == 1 and stalled_at.metadata["run_id"] not in later, "every later step is B's"
        again = run_sync(reader.aget(thread, stalled_at.id))
        assert again is not None and again.pending_writes == (), "A saved writes after B folded that step"
        assert json.loads((tmp_path / "b.json").read_text()) == reference.final
        info = run_sync(reader.aget_thread(thread))
        assert info is not None and info.status == "idle" and info.lease is None, info
    finally:
        run_sync(reader.aclose())


def test_a_killed_run_on_this_machine_is_taken_over_at_once(
    crash_child: ModuleType, store: Store, launcher: Launcher, reference: Reference, tmp_path: Path
) -> None:
    """SIGKILL leaves the lease behind, unexpired; a new run here sees its holder is gone
    and takes the thread at once (no ThreadBusyError, no wait for the lease to lapse)."""
    thread = "killed"
    base = {**store.child_args(), "thread": thread, "durability": "sync", "lease_ttl": 600}
    a = launcher.run(
        {**base, "ledger": str(tmp_path / "a.ledger"), "result": str(tmp_path / "a.json"), "fresh": True},
        kill=crash_child.At(kind="commit", step=STALL_STEP),
    )
    assert a.killed
    store.settle()
    reader = store.open(reader=True)
    run_sync(reader.asetup())
    try:
        left = run_sync(reader.aget_thread(thread))
        assert left is not None and left.lease is not None and left.lease.expires_at > time.time() + 60
        assert left.status == "stale", "a lease whose holder is gone does not make the thread busy"
        started = time.monotonic()
        b = launcher.run(
            {**base, "ledger": str(tmp_path / "b.ledger"), "result": str(tmp_path / "b.json"), "fresh": False}
        )
        assert b.exit_code == 0, b.describe()
        assert not b.events or all(e.kind != "failed" for e in b.events)
        assert time.monotonic() - started < 60, "the resume waited for a ten-minute lease"
        reference.check_thread(reader, thread, "resumed at once after a SIGKILL")
    finally:
        run_sync(reader.aclose())
