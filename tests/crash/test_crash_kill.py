"""Nothing is lost: prove it.

A graph with a parallel fan-out, a join and a loop runs in a child process that is SIGKILLed
at chosen points, then resumed in a new process, again and again: at least 200 kills per
backend, on SQLite, the file backend and (when it is reachable) Postgres. Threads alternate
between ``sync`` and ``async`` durability. The kills take turns at five kinds of point, each
drawn (seeded) among the points of that kind the thread has not passed yet:

- ``node``: as a task starts;
- ``effect``: inside a ``once`` effect, after it ran, before its result is recorded;
- ``recorded``: right after ``once`` returned (its result is stored);
- ``commit``: right after the commit that stored a chosen checkpoint returned;
- ``inside``: at a random moment inside a chosen step (a seeded delay after the step began),
  or at the start of the next step if the child gets there first.

The child reports each point as it reaches it and waits there when asked to (see
crash_child.py), so every kill lands at its point however loaded the machine is, and what
the store must show right after it is checked: a returned commit is there, a recorded effect
is there, a task that had not finished has no result.

After every kill, before the next child starts, the test reads the store and writes down
which tasks finished and which ``once`` effects were recorded, and where the ledger ended.
When a thread finally completes without a kill:

1. every committed checkpoint reads back whole (history and get by id), satisfies the
   graph's invariants and equals the uninterrupted run's checkpoint of the same step;
2. the final state (stored and returned by ``invoke``) equals an uninterrupted in-process
   run's;
3. no task that had finished (its checkpoint had a child, or its result was a pending write
   on the head) started again after that was observed;
4. no ``once`` effect whose result was recorded ran again after that was observed.

Set PLAIT_CRASH_SEED to replay a seed: the same points are chosen and the kills at events
land at the same events (only where an ``inside`` kill lands within its step depends on
timing, and the points chosen after it on the head it left).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from plait import Checkpoint, Checkpointer, thaw
from plait._sync import run_sync

if TYPE_CHECKING:  # for the annotations only: at run time pytest gives them as fixtures
    from ._harness import Launcher, Outcome, Reference, Store

pytestmark = pytest.mark.slow

KILLS_PER_BACKEND = 200
KILL_KINDS = ("node", "effect", "recorded", "commit", "inside")
"""The kinds of point the kills take turns at (see the module docstring)."""
INSIDE_SPAN = 0.010
"""Seconds: an ``inside`` kill comes a uniform random delay in [0, INSIDE_SPAN) after its
step began (a step of this graph takes a few ms on an idle machine), or as the next begins."""
KILL_AHEAD = 6
"""A kill's point is at most this many steps past the thread's head (two rounds of the
loop), so each child runs a short way before its kill, as a crash usually finds a run."""
MAX_KILLS_PER_THREAD = 30
"""After this many kills a thread's next child runs to the end unharmed."""
DURABILITIES = ("sync", "async")
"""Threads alternate: commit before each next step, or overlap commits with the steps."""
THREADS_IN_FLIGHT = 4
"""Threads worked on in turn, so a killed run's lease has lapsed by the thread's next turn."""


@dataclass(frozen=True)
class Kill:
    """Where one child is to be killed."""

    kind: str
    """One of KILL_KINDS."""
    step: int
    at: Any
    """The crash_child.At the kill comes at (or, for ``inside``, the delay counts from)."""
    delay: float | None = None
    at_latest: Any = None

    def __str__(self) -> str:
        late = f", {self.delay * 1000:.1f} ms later or at {self.at_latest}" if self.delay is not None else ""
        return f"{self.kind} kill at {self.at}{late}"


@dataclass
class ThreadRun:
    """One thread of the store, driven to completion through kills."""

    thread: str
    ledger: Path
    result: Path
    durability: str
    kills: int = 0
    children: int = 0
    finished_at: dict[str, int] = field(default_factory=dict)
    """Task id -> ledger size when the store first showed the task finished."""
    recorded_at: dict[str, int] = field(default_factory=dict)
    """Task id -> ledger size when the store first showed its ``once`` effect recorded."""
    observations: list[str] = field(default_factory=list)
    """What the store held after each kill (for failure messages)."""
    committed: set[str] = field(default_factory=set)
    """Ids of the checkpoints seen stored so far: none may disappear."""
    pending: tuple[str, frozenset[tuple[str, str, str]]] | None = None
    """The head id and the pending writes (task, kind, key) seen on it after the last kill."""


@dataclass
class Stats:
    kills: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    """Kills per kind of point."""
    inside_early: int = 0
    """``inside`` kills that came before the next step began (the others came as it began)."""
    mid_run_kills: int = 0
    """Kills after which the thread had a checkpoint but was not finished."""
    reruns: int = 0
    """Task starts that repeated an earlier start (legitimate: the task had not finished)."""
    completed: int = 0


def _seed() -> int:
    env = os.environ.get("PLAIT_CRASH_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


def _ledger_lines(path: Path) -> list[tuple[int, str, str]]:
    """(byte offset, kind, task id) for each line of the ledger."""
    out = []
    offset = 0
    data = path.read_bytes() if path.exists() else b""
    for raw in data.splitlines(keepends=True):
        assert raw.endswith(b"\n"), f"torn ledger line {raw!r} at {offset}"
        kind, tid = raw.decode().split()
        out.append((offset, kind, tid))
        offset += len(raw)
    return out


def _lineage(saver: Checkpointer, run: ThreadRun) -> tuple[Checkpoint | None, list[Checkpoint]]:
    head = run_sync(saver.aget(run.thread))
    if head is None:
        return None, []
    lineage = run_sync(saver.ahistory(run.thread))
    assert lineage, f"{run.thread}: a head {head.id} but no history"
    assert lineage[0].id == head.id, f"{run.thread}: history starts at {lineage[0].id}, head is {head.id}"
    for child, parent in zip(lineage, lineage[1:], strict=False):
        assert child.parent_id == parent.id, f"{run.thread}: {child.id} has parent {child.parent_id}, not {parent.id}"
        assert child.step == parent.step + 1, f"{run.thread}: step {child.step} follows step {parent.step}"
    assert lineage[-1].parent_id is None and lineage[-1].step == 0
    return head, lineage


def _observe(saver: Checkpointer, run: ThreadRun, crash_child: ModuleType, kill: Kill) -> Checkpoint | None:
    """After a kill: what does the store say finished, and where does the ledger end?"""
    head, lineage = _lineage(saver, run)
    size = run.ledger.stat().st_size if run.ledger.exists() else 0
    if head is None:
        assert not run.committed, f"{run.thread}: its checkpoints {run.committed} are gone: {run.observations}"
        run.observations.append(f"{kill}: no checkpoint, ledger {size}")
        return None
    crash_child.check_values(head.values)
    ids = {cp.id for cp in lineage}
    lost = run.committed - ids
    assert not lost, f"{run.thread}: committed checkpoints {lost} are no longer in the lineage: {run.observations}"
    run.committed = ids
    writes = frozenset((p.task_id, p.kind, p.key) for p in head.pending_writes)
    if run.pending is not None and run.pending[0] == head.id:
        gone = run.pending[1] - writes
        assert not gone, f"{run.thread}: pending writes {gone} of head {head.id} vanished: {run.observations}"
    run.pending = (head.id, writes)
    planned = {t.id for t in head.next_tasks}
    results = {p.task_id for p in head.pending_writes if p.kind == "result"}
    effects = {p.task_id for p in head.pending_writes if p.kind == "effect"}
    assert results <= planned, f"{run.thread}: results for unplanned tasks {results - planned}"
    assert effects <= planned, f"{run.thread}: effects for unplanned tasks {effects - planned}"
    finished = {t.id for cp in lineage[1:] for t in cp.next_tasks} | results
    for tid in finished:
        run.finished_at.setdefault(tid, size)
    for tid in finished | effects:
        run.recorded_at.setdefault(tid, size)
    run.observations.append(
        f"{kill}: head step {head.step}, {len(results)} results and {len(effects)} effects pending "
        f"of {len(planned)} tasks, ledger {size}"
    )
    return head


def _kill_points(reference: Reference, workers: tuple[str, ...]) -> dict[str, list[tuple[int, str | None]]]:
    """(step, node) of every point of each kind in the uninterrupted run."""
    points: dict[str, list[tuple[int, str | None]]] = {kind: [] for kind in KILL_KINDS}
    for step, nodes in sorted(reference.nodes_by_step.items()):
        points["commit"].append((step, None))
        if nodes:
            points["inside"].append((step, None))
        for node in nodes:
            points["node"].append((step, node))
            if node in workers:
                points["effect"].append((step, node))
                points["recorded"].append((step, node))
    return points


def _choose_kill(
    rng: random.Random,
    kind: str,
    points: dict[str, list[tuple[int, str | None]]],
    head: Checkpoint | None,
    crash_child: ModuleType,
) -> Kill | None:
    """A point of ``kind`` the next child will reach within KILL_AHEAD steps of the head (of
    any kind if there is none), or None."""
    at = crash_child.At
    floor = -1 if head is None else head.step
    done: dict[str, set[str]] = {"result": set(), "effect": set()}
    if head is not None:
        by_task = {t.id: t.node for t in head.next_tasks}
        for p in head.pending_writes:
            if p.kind in done:
                done[p.kind].add(by_task[p.task_id])

    def reached(k: str, step: int, node: str | None) -> bool:
        if step > floor + KILL_AHEAD:
            return False
        if k == "commit":
            return step > floor  # the head's checkpoint is not committed again
        if step > floor:
            return True
        if step < floor:
            return False
        # the head's own tasks: one whose result is saved does not run again, nor a recorded effect
        if k == "inside":
            return any(t.node not in done["result"] for t in head.next_tasks) if head is not None else True
        return node not in done["result"] and (k != "effect" or node not in done["effect"])

    for k in (kind, *KILL_KINDS):
        left = [(s, n) for s, n in points[k] if reached(k, s, n)]
        if left:
            step, node = rng.choice(left)
            if k == "inside":
                return Kill(k, step, at(step=step), rng.uniform(0.0, INSIDE_SPAN), at(step=step + 1))
            return Kill(k, step, at(kind=k, step=step, node=node))
    return None


def _check_kill(kill: Kill, outcome: Outcome, head: Checkpoint | None, run: ThreadRun) -> None:
    """What the store must show right after a kill at ``kill``."""
    where = f"{run.thread} ({run.durability}), {kill}, {outcome.describe()}"
    assert outcome.killed, f"{where}: not killed"
    if kill.delay is None:
        assert outcome.killed_at is not None and kill.at.matches(outcome.killed_at), f"{where}: killed elsewhere"
    sync = run.durability == "sync"
    step = -1 if head is None else head.step
    task = outcome.killed_at.task if outcome.killed_at is not None else None
    pending = {(p.task_id, p.kind) for p in head.pending_writes} if head is not None else set()
    if kill.kind == "commit":
        assert step >= kill.step, f"{where}: checkpoint {kill.step} was committed, the head is at step {step}"
    elif kill.kind == "inside":
        assert (kill.step if sync else -1) <= step <= kill.step + 1, f"{where}: the head is at step {step}"
    elif kill.kind == "recorded":
        assert step == kill.step, f"{where}: the head is at step {step}"
        assert (task, "effect") in pending, f"{where}: once() returned, its effect is not recorded"
    else:  # node, effect: the task had not finished, and its effect is not recorded yet
        assert step == kill.step if sync else step <= kill.step, f"{where}: the head is at step {step}"
        assert (task, "result") not in pending, f"{where}: a result of the task that was still running"
        if kill.kind == "effect":
            assert (task, "effect") not in pending, f"{where}: the effect's result was recorded before it returned"


def _check_ledger(run: ThreadRun, seed: int, stats: Stats) -> None:
    """Checks 3 and 4: nothing observed as finished / recorded ran again afterwards."""
    seen: set[str] = set()
    for offset, kind, tid in _ledger_lines(run.ledger):
        if kind == "start":
            at = run.finished_at.get(tid)
            assert at is None or offset < at, (
                f"seed {seed}, {run.thread}: task {tid} started again at ledger offset {offset}, after the store "
                f"showed it finished (ledger size {at} then). Observations: {run.observations}"
            )
            if tid in seen:
                stats.reruns += 1
            seen.add(tid)
        else:
            assert kind == "effect", f"unknown ledger line {kind} {tid}"
            at = run.recorded_at.get(tid)
            assert at is None or offset < at, (
                f"seed {seed}, {run.thread}: once effect of task {tid} ran again at ledger offset {offset}, after "
                f"the store showed it recorded (ledger size {at} then). Observations: {run.observations}"
            )


def _check_completed(crash_child: ModuleType, store: Store, run: ThreadRun, reference: Reference, seed: int) -> None:
    """Checks 1 and 2 on a fresh checkpointer, then the ledger against the final lineage."""
    saver = store.open(reader=True)
    try:
        where = f"seed {seed}, {run.thread}"
        reference.check_thread(saver, run.thread, where)
        returned = json.loads(run.result.read_text())
        assert returned == reference.final, f"{where}: invoke() returned {returned}"

        # Every task of the final lineage ran (has a start line), and every worker charged.
        _, lineage = _lineage(saver, run)
        lines = _ledger_lines(run.ledger)
        started = {tid for _, kind, tid in lines if kind == "start"}
        charged = {tid for _, kind, tid in lines if kind == "effect"}
        done = [t for cp in lineage[1:] for t in cp.next_tasks]
        assert {t.id for t in done} <= started, f"{where}: tasks of the lineage never logged a start"
        workers = {t.id for t in done if t.node in crash_child.WORKERS}
        assert workers <= charged, f"{where}: workers whose effect never ran: {workers - charged}"
        assert len(workers) == 3 * crash_child.ROUNDS
        size = run.ledger.stat().st_size
        for t in done:
            run.finished_at.setdefault(t.id, size)
            run.recorded_at.setdefault(t.id, size)
    finally:
        run_sync(saver.aclose())


def test_kill_and_resume_loses_nothing(
    crash_child: ModuleType,
    store: Store,
    launcher: Launcher,
    reference: Reference,
    tmp_path: Path,
) -> None:
    seed = _seed()
    rng = random.Random(seed)
    stats = Stats()
    points = _kill_points(reference, crash_child.WORKERS)
    reader = store.open(reader=True)
    run_sync(reader.asetup())
    errors = tmp_path / "children.err"
    made = planned = 0

    def new_run() -> ThreadRun:
        nonlocal made
        made += 1
        name = f"crash-{made}"
        return ThreadRun(
            thread=name,
            ledger=tmp_path / f"{name}.ledger",
            result=tmp_path / f"{name}.json",
            durability=DURABILITIES[made % len(DURABILITIES)],
        )

    try:
        active = [new_run() for _ in range(THREADS_IN_FLIGHT)]
        heads: dict[str, Checkpoint | None] = {r.thread: None for r in active}
        while active:
            run = active.pop(0)
            kill = None
            if stats.kills < KILLS_PER_BACKEND and run.kills < MAX_KILLS_PER_THREAD:
                kill = _choose_kill(rng, KILL_KINDS[planned % len(KILL_KINDS)], points, heads[run.thread], crash_child)
                planned += 1
            args = {
                **store.child_args(),
                "thread": run.thread,
                "ledger": str(run.ledger),
                "result": str(run.result),
                "fresh": heads[run.thread] is None,
                "durability": run.durability,
            }
            if kill is None:
                outcome = launcher.run(args)
            else:
                outcome = launcher.run(args, kill.at, delay=kill.delay, at_latest=kill.at_latest)
            store.settle()
            run.children += 1
            if kill is not None and outcome.killed:
                run.kills += 1
                stats.kills += 1
                stats.by_kind[kill.kind] += 1
                stats.inside_early += kill.kind == "inside" and outcome.killed_at is None
                head = _observe(reader, run, crash_child, kill)
                _check_kill(kill, outcome, head, run)
                heads[run.thread] = head
                if head is not None and head.next_tasks:
                    stats.mid_run_kills += 1
                active.append(run)
                continue
            assert not outcome.hung, f"seed {seed}, {run.thread}: child {outcome.describe()}: it hung"
            assert outcome.exit_code == 0, (
                f"seed {seed}, {run.thread}: child {outcome.describe()} after {run.kills} kills\n"
                f"{errors.read_text() if errors.exists() else ''}\nObservations: {run.observations}"
            )
            assert kill is None, f"seed {seed}, {run.thread}: the run ended before its {kill}: {outcome.describe()}"
            # finished: checks 1 and 2, then 3 and 4 over the whole ledger
            _check_completed(crash_child, store, run, reference, seed)
            _check_ledger(run, seed, stats)
            # resuming the finished thread once more runs nothing and stores nothing
            size, before = run.ledger.stat().st_size, run_sync(reader.aget(run.thread))
            again = launcher.run({**args, "fresh": False})
            store.settle()
            assert again.exit_code == 0, f"seed {seed}, {run.thread}: {again.describe()} resuming a finished thread"
            assert run.ledger.stat().st_size == size, f"seed {seed}, {run.thread}: a finished thread ran nodes again"
            assert not [e for e in again.events if e.kind == "commit"], f"{run.thread}: a finished thread committed"
            after = run_sync(reader.aget(run.thread))
            assert before is not None and after is not None and after.id == before.id
            stats.completed += 1
            del heads[run.thread]
            if stats.kills < KILLS_PER_BACKEND:
                nxt = new_run()
                heads[nxt.thread] = None
                active.append(nxt)
    except AssertionError as exc:
        raise AssertionError(f"[{store.backend}, PLAIT_CRASH_SEED={seed}] {exc}") from exc
    finally:
        run_sync(reader.aclose())

    print(
        f"\n[{store.backend}] seed {seed}: {stats.kills} kills ({dict(stats.by_kind)}; {stats.inside_early} inside "
        f"kills before the next step began; {stats.mid_run_kills} mid-run), {stats.completed} threads completed, "
        f"{stats.reruns} re-run task starts"
    )
    assert stats.kills >= KILLS_PER_BACKEND
    assert set(stats.by_kind) == set(KILL_KINDS), f"seed {seed}: kills by kind {dict(stats.by_kind)}"
    assert stats.mid_run_kills > 0, f"seed {seed}: no kill landed while a run was in progress"


CHAT_KILLS = 30
"""Kills per backend for the list-chain test (each lands somewhere in a 60-step chain)."""
CHAT_KILL_KINDS = ("commit", "node", "inside")
PAST_ANCHOR = 17
"""Every other chat kill comes at this step or later: past the chain's first anchor."""
CHAT_AHEAD = 12
"""A chat kill's step is at most this many steps past the lowest it may have."""

SQL_ANCHORS = """SELECT count(*) FROM {P}blobs b JOIN {P}checkpoints c
    ON c.ns = b.ns AND c.thread_id = b.thread_id AND c.id = b.id
    WHERE b.thread_id = %s AND b.channel = 'messages' AND b.base_id IS NOT NULL AND b.base_id <> c.parent_id"""


def _anchors(store: Store, thread: str) -> int:
    """Blobs of the chat's ``messages`` based on one other than their parent's (anchors);
    -1 for a store that does not link its chains (the file backend)."""
    if store.backend == "sqlite":
        import sqlite3

        with closing(sqlite3.connect(store.location)) as conn, conn:  # commits, then closes
            rows = conn.execute(SQL_ANCHORS.replace("{P}", "plait_").replace("%s", "?"), (thread,)).fetchall()
    elif store.backend == "postgres":
        import psycopg

        with psycopg.connect(store.reader_location) as pg:
            rows = pg.execute(SQL_ANCHORS.replace("{P}", f'"{store.pg_schema}".plait_'), (thread,)).fetchall()
    else:
        return -1
    return int(rows[0][0])


def _check_chat(reader: Checkpointer, thread: str, expected: list[Any], committed: set[str]) -> int:
    """Every checkpoint of ``thread`` reads back (history, and by id) with exactly the
    messages of its step, and none seen before is gone; returns the head's step (-1: no
    checkpoint yet)."""
    history = run_sync(reader.ahistory(thread))
    ids = {cp.id for cp in history}
    assert committed <= ids, f"committed checkpoints disappeared: {sorted(committed - ids)}"
    for cp in history:
        messages = thaw(cp.values.get("messages", []))
        assert messages == expected[: cp.step], f"checkpoint {cp.id} (step {cp.step}): wrong messages"
        by_id = run_sync(reader.aget(thread, cp.id))
        assert by_id is not None and thaw(by_id.values) == thaw(cp.values), f"checkpoint {cp.id} by id"
    committed |= ids
    return history[0].step if history else -1


def _choose_chat_kill(rng: random.Random, kills: int, head: int, crash_child: ModuleType) -> Kill | None:
    """The ``kills``-th kill: kinds in turn, a step past the head (past the first anchor for
    every other kill) by at most CHAT_AHEAD, or None when the thread has no such step left."""
    at = crash_child.At
    kind = CHAT_KILL_KINDS[(kills // 2) % len(CHAT_KILL_KINDS)]
    low = max(head + 1, PAST_ANCHOR if kills % 2 else 0)
    high = min(low + CHAT_AHEAD, crash_child.CHAT_STEPS if kind == "commit" else crash_child.CHAT_STEPS - 1)
    if low > high:
        return None
    step = rng.randint(low, high)
    if kind == "inside":
        return Kill(kind, step, at(step=step), rng.uniform(0.0, INSIDE_SPAN), at(step=step + 1))
    return Kill(kind, step, at(kind=kind, step=step))


def test_kill_and_resume_a_long_list_chain_loses_nothing(
    crash_child: ModuleType, store: Store, launcher: Launcher, tmp_path: Path
) -> None:
    """The chat graph appends one message per step for 60 steps (in the SQL stores: a chain
    of deltas linked through anchors, which a resumed run continues) and is SIGKILLed at
    chosen points, then resumed: after every kill each stored checkpoint reads back, by id
    and as history, with exactly the messages of its step, a commit that returned is there,
    and the thread finishes with all of them."""
    seed = _seed()
    rng = random.Random(seed)
    reader = store.open(reader=True)
    run_sync(reader.asetup())
    expected = [crash_child.chat_message(i) for i in range(crash_child.CHAT_STEPS)]
    kills = threads = 0
    killed_at: list[int] = []
    """The head's step after each kill."""
    try:
        while kills < CHAT_KILLS:
            threads += 1
            thread, committed, step = f"chat-{threads}", set[str](), -1
            durability = DURABILITIES[threads % len(DURABILITIES)]
            result = tmp_path / f"{thread}.json"
            while True:
                kill = _choose_chat_kill(rng, kills, step, crash_child) if kills < CHAT_KILLS else None
                args = {
                    **store.child_args(),
                    "mode": "chat",
                    "thread": thread,
                    "ledger": str(tmp_path / f"{thread}.ledger"),
                    "result": str(result),
                    "fresh": step < 0,
                    "durability": durability,
                }
                if kill is None:
                    outcome = launcher.run(args)
                else:
                    outcome = launcher.run(args, kill.at, delay=kill.delay, at_latest=kill.at_latest)
                store.settle()
                step = _check_chat(reader, thread, expected, committed)
                if kill is not None and outcome.killed:
                    where = f"{thread} ({durability}), {kill}: the head is at step {step}"
                    if kill.kind == "commit":
                        assert step >= kill.step, where
                    elif kill.kind == "node":
                        assert step == kill.step if durability == "sync" else step <= kill.step, where
                    else:
                        assert (kill.step if durability == "sync" else -1) <= step <= kill.step + 1, where
                    kills += 1
                    killed_at.append(step)
                    continue
                assert outcome.exit_code == 0, f"{thread}: child {outcome.describe()}, asked for {kill}"
                assert json.loads(result.read_text())["messages"] == expected
                assert _anchors(store, thread) != 0, "the chain was linked through anchors"
                break
    except AssertionError as exc:
        raise AssertionError(f"[{store.backend}, PLAIT_CRASH_SEED={seed}] {exc}") from exc
    finally:
        run_sync(reader.aclose())
    print(f"\n[{store.backend}] seed {seed}: {kills} kills over {threads} chat threads, heads at {killed_at}")
    past = [step for step in killed_at if PAST_ANCHOR <= step < crash_child.CHAT_STEPS]
    assert past, f"seed {seed}: no kill left the head past the first anchor: {killed_at}"
