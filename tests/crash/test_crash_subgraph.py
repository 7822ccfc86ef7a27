"""A SIGKILL inside a subgraph: the resumed run continues inside it, and no subgraph step
that had finished runs again.

The parent runs ``before``, then ``research`` (a subgraph whose ``say`` loops SUB_STEPS
steps in the child namespace of the thread), then ``fin`` (see crash_child.py). Each child
process is killed as ``say`` starts from a chosen step of the subgraph (an event the child
reports and waits at, so the kill lands exactly there), then resumed in a new process.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from plait import thaw
from plait._sync import run_sync
from plait.engine.subgraph import child_namespace

if TYPE_CHECKING:  # for the annotations only: at run time pytest gives them as fixtures
    from ._harness import Launcher, Store


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_kill_inside_a_subgraph_resumes_inside_it_without_repeating_finished_steps(
    crash_child: ModuleType, store: Store, launcher: Launcher, tmp_path: Path, durability: str
) -> None:
    if store.backend == "file":
        pytest.skip("the brief asks for SQLite and Postgres; the file backend is covered by tests/engine")
    ledger = tmp_path / "sub.ledger"
    result = tmp_path / "sub.json"
    base = {
        **store.child_args(),
        "mode": "sub",
        "thread": "sub",
        "ledger": str(ledger),
        "result": str(result),
        "durability": durability,
    }
    kills = (3, 7)  # subgraph steps: ``say`` is killed as it starts from each, in turn
    reader = store.open(reader=True)
    finished: dict[str, int] = {}
    """Subgraph tasks seen finished after a kill (their checkpoint has a stored child): the
    ledger's length then, after which they must never start again."""
    try:
        for n, step in enumerate(kills):
            outcome = launcher.run({**base, "fresh": n == 0}, crash_child.At(kind="node", node="say", step=step))
            assert outcome.killed, outcome.describe()
            store.settle()
            head = run_sync(reader.aget("sub"))
            assert head is not None and [t.node for t in head.next_tasks] == ["research"]
            inner = run_sync(reader.aget("sub", namespace=child_namespace("", "research", head.next_tasks[0].id)))
            # sync: every finished step is stored; async may be commits behind the kill
            if durability == "sync":
                assert inner is not None and inner.step == step
            elif inner is None:
                continue
            assert inner.step <= step
            history = run_sync(reader.ahistory("sub", namespace=inner.namespace))
            mark = len(ledger.read_text().splitlines())
            for cp in history[1:]:
                for t in cp.next_tasks:
                    finished.setdefault(t.id, mark)
            assert len(finished) == inner.step
        outcome = launcher.run({**base, "fresh": False})
        assert outcome.exit_code == 0, outcome.describe()
    finally:
        run_sync(reader.aclose())
    out = json.loads(result.read_text())
    messages = thaw(out["messages"])
    steps = crash_child.SUB_STEPS
    assert messages == ["before:0", *(crash_child.chat_message(i) for i in range(1, steps + 1)), f"fin:{steps + 1}"]
    started = Counter(line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("start "))
    lines = ledger.read_text().splitlines()
    for task, mark in finished.items():
        assert f"start {task}" not in lines[mark:], f"subgraph task {task} ran again after it had finished"
    again = sorted(task for task, times in started.items() if times > 1)
    if durability == "sync":  # every step is stored before the next starts: only the killed tasks ran twice
        assert len(started) == 1 + steps + 1 and len(again) == len(kills), started
    else:
        # Steps whose group commit had not returned when the kill landed (there may be several
        # queued behind the one in flight) are planned again, under new task ids: how many
        # depends on the moment, so only the laws hold: no task seen finished ran again (above),
        # the messages are exact (above), and each kill re-ran at most the task it cut off.
        assert len(again) <= len(kills), started
