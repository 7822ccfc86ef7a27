"""Nothing is lost: prove it.

A graph with a parallel fan-out, a join and a loop runs in a child process that is SIGKILLed
at random moments (seeded delays of 0-60 ms from the fork; 0-150 ms on Postgres, whose
children take longer to connect), then resumed in a new process, again and again: at least
200 kills per backend, on SQLite, the file backend and (when it is reachable) Postgres.
Threads alternate between ``sync`` and ``async`` durability. After every kill, before the next child starts, the
test reads the store and writes down which tasks finished and which ``once`` effects were
recorded, and where the ledger ended. When a thread finally completes without a kill:

1. every committed checkpoint reads back whole (history and get by id), satisfies the
   graph's invariants and equals the uninterrupted run's checkpoint of the same step;
2. the final state (stored and returned by ``invoke``) equals an uninterrupted in-process
   run's;
3. no task that had finished (its checkpoint had a child, or its result was a pending write
   on the head) started again after that was observed;
4. no ``once`` effect whose result was recorded ran again after that was observed.

Set PLAIT_CRASH_SEED to replay a seed (the kill moments repeat; the exact instructions the
kills land on depend on timing, so a seed narrows a failure down rather than pinning it).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pytest

from plait import Checkpoint, Checkpointer, MemoryCheckpointer, thaw
from plait._sync import run_sync

pytestmark = pytest.mark.slow

KILLS_PER_BACKEND = 200
MAX_DELAY = {"sqlite": 0.060, "file": 0.060, "postgres": 0.150}
"""Seconds: a child is killed after a uniform random delay in [0, MAX_DELAY) from its fork.
Postgres gets longer: a child needs ~20-60 ms to connect before it can run anything."""
MAX_KILLS_PER_THREAD = 30
"""After this many kills a thread's next child runs to the end unharmed."""
DURABILITIES = ("sync", "async")
"""Threads alternate: commit before each next step, or overlap commits with the steps."""
THREADS_IN_FLIGHT = 4
"""Threads worked on in turn, so a killed run's lease has lapsed by the thread's next turn."""


class Launcher(Protocol):
    """conftest.Launcher: runs one child, SIGKILLed after ``delay`` seconds if still running."""

    def run(self, args: dict[str, Any], delay: float | None) -> Any: ...


@dataclass
class Reference:
    """The uninterrupted run, in-process on a MemoryCheckpointer."""

    final: dict[str, Any]
    by_step: dict[int, dict[str, Any]]
    checkpoints: int


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
    mid_run_kills: int = 0
    """Kills after which the thread had a checkpoint but was not finished."""
    reruns: int = 0
    """Task starts that repeated an earlier start (legitimate: the task had not finished)."""
    completed: int = 0


@pytest.fixture(scope="module")
def reference(crash_child: ModuleType) -> Reference:
    graph = crash_child.build_graph().compile(checkpointer=MemoryCheckpointer())
    final = thaw(graph.invoke(dict(crash_child.INPUT), thread_id="reference"))
    history = graph.get_state_history("reference")
    return Reference(
        final=final,
        by_step={s.step: thaw(s.values) for s in history},
        checkpoints=len(history),
    )


@dataclass
class Store:
    """Where the children keep their checkpoints."""

    backend: str
    location: str
    """The SQLite file, the FileCheckpointer folder, or the Postgres DSN the children use."""
    pg_schema: str | None = None
    reader_location: str = ""
    """What the test itself opens (the Postgres DSN without the children's application name)."""
    settled: Callable[[], bool] = lambda: True
    """True once nothing a dead child started can still change the store."""

    def child_args(self) -> dict[str, Any]:
        return {"backend": self.backend, "store": self.location, "pg_schema": self.pg_schema}

    def open(self, crash_child: ModuleType, *, reader: bool = False) -> Checkpointer:
        where = self.reader_location if reader and self.reader_location else self.location
        saver: Checkpointer = crash_child.open_checkpointer(self.backend, where, self.pg_schema)
        return saver

    def settle(self) -> None:
        """Wait until a killed child's last request can no longer land.

        A SIGKILLed Postgres client may have sent a COMMIT the server has not run yet: the
        server finishes it after the client is gone. So after a kill, wait for the server
        sessions of the children (tagged with an application name) to end."""
        for _ in range(5000):
            if self.settled():
                return
            time.sleep(0.002)
        raise AssertionError(f"{self.backend}: a killed child's server session did not end within 10 s")


@pytest.fixture(params=["sqlite", "file", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    backend: str = request.param
    if backend == "sqlite":
        pytest.importorskip("plait.checkpoint.sqlite")
        yield Store("sqlite", str(tmp_path / "crash.sqlite"))
    elif backend == "file":
        pytest.importorskip("plait.checkpoint.file")
        yield Store("file", str(tmp_path / "crash-store"))
    else:
        pytest.importorskip("plait.checkpoint.postgres")
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema: str = request.getfixturevalue("postgres_schema")
        import psycopg
        from psycopg.conninfo import make_conninfo

        tag = f"plait-crash-{schema}"
        with psycopg.connect(dsn, autocommit=True) as watcher:

            def settled() -> bool:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
                ).fetchone()
                return row is not None and row[0] == 0

            yield Store(
                "postgres",
                make_conninfo(dsn, application_name=tag),
                pg_schema=schema,
                reader_location=dsn,
                settled=settled,
            )


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


def _observe(saver: Checkpointer, run: ThreadRun, crash_child: ModuleType) -> Checkpoint | None:
    """After a kill: what does the store say finished, and where does the ledger end?"""
    head, lineage = _lineage(saver, run)
    size = run.ledger.stat().st_size if run.ledger.exists() else 0
    if head is None:
        assert not run.committed, f"{run.thread}: its checkpoints {run.committed} are gone: {run.observations}"
        run.observations.append(f"kill {run.kills}: no checkpoint, ledger {size}")
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
        f"kill {run.kills}: head step {head.step}, {len(results)} results and {len(effects)} effects pending "
        f"of {len(planned)} tasks, ledger {size}"
    )
    return head


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
    saver = store.open(crash_child, reader=True)
    try:
        graph = crash_child.build_graph().compile(checkpointer=saver)
        where = f"seed {seed}, {run.thread}"
        history = graph.get_state_history(run.thread)
        assert len(history) == reference.checkpoints, (
            f"{where}: {len(history)} checkpoints, the uninterrupted run made {reference.checkpoints}"
        )
        for state in history:
            crash_child.check_values(state.values)
            again = graph.get_state(run.thread, state.checkpoint_id)
            assert again.checkpoint_id == state.checkpoint_id and again.step == state.step
            assert thaw(again.values) == thaw(state.values), (
                f"{where}: checkpoint {state.checkpoint_id} reads back two ways"
            )
            assert again.tasks == state.tasks
            assert thaw(state.values) == reference.by_step[state.step], (
                f"{where}: step {state.step} differs from the uninterrupted run"
            )
        head = graph.get_state(run.thread)
        assert head.checkpoint_id == history[0].checkpoint_id and head.next == ()
        assert thaw(head.values) == reference.final, f"{where}: final state differs from the uninterrupted run"
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
    reader = store.open(crash_child, reader=True)
    run_sync(reader.asetup())
    errors = tmp_path / "children.err"
    made = 0

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
            killing = stats.kills < KILLS_PER_BACKEND and run.kills < MAX_KILLS_PER_THREAD
            delay = rng.uniform(0.0, MAX_DELAY[store.backend]) if killing else None
            args = {
                **store.child_args(),
                "thread": run.thread,
                "ledger": str(run.ledger),
                "result": str(run.result),
                "fresh": heads[run.thread] is None,
                "durability": run.durability,
            }
            outcome = launcher.run(args, delay)
            store.settle()
            run.children += 1
            if outcome.killed:
                run.kills += 1
                stats.kills += 1
                head = _observe(reader, run, crash_child)
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
            # finished: checks 1 and 2, then 3 and 4 over the whole ledger
            _check_completed(crash_child, store, run, reference, seed)
            _check_ledger(run, seed, stats)
            # resuming the finished thread once more runs nothing and stores nothing
            size, before = run.ledger.stat().st_size, run_sync(reader.aget(run.thread))
            again = launcher.run({**args, "fresh": False}, None)
            store.settle()
            assert again.exit_code == 0, f"seed {seed}, {run.thread}: {again.describe()} resuming a finished thread"
            assert run.ledger.stat().st_size == size, f"seed {seed}, {run.thread}: a finished thread ran nodes again"
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
        f"\n[{store.backend}] seed {seed}: {stats.kills} kills ({stats.mid_run_kills} mid-run), "
        f"{stats.completed} threads completed, {stats.reruns} re-run task starts"
    )
    assert stats.kills >= KILLS_PER_BACKEND
    assert stats.mid_run_kills > 0, f"seed {seed}: no kill landed while a run was in progress"


CHAT_KILLS = 30
"""Kills per backend for the list-chain test (each lands somewhere in a 60-step chain)."""

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

        with psycopg.connect(store.reader_location) as conn:
            rows = conn.execute(SQL_ANCHORS.replace("{P}", f'"{store.pg_schema}".plait_'), (thread,)).fetchall()
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


def test_kill_and_resume_a_long_list_chain_loses_nothing(
    crash_child: ModuleType, store: Store, launcher: Launcher, tmp_path: Path
) -> None:
    """The chat graph appends one message per step for 60 steps (in the SQL stores: a chain
    of deltas linked through anchors, which a resumed run continues) and is SIGKILLed at
    random moments, then resumed: after every kill each stored checkpoint reads back, by id
    and as history, with exactly the messages of its step, and the thread finishes with all
    of them."""
    seed = _seed()
    rng = random.Random(seed)
    reader = store.open(crash_child, reader=True)
    run_sync(reader.asetup())
    expected = [crash_child.chat_message(i) for i in range(crash_child.CHAT_STEPS)]
    kills = threads = 0
    killed_at: list[int] = []
    """The head's step after each kill."""
    try:
        while kills < CHAT_KILLS:
            threads += 1
            thread, committed, exists = f"chat-{threads}", set[str](), False
            result = tmp_path / f"{thread}.json"
            while True:
                delay = rng.uniform(0.0, MAX_DELAY[store.backend]) if kills < CHAT_KILLS else None
                args = {
                    **store.child_args(),
                    "mode": "chat",
                    "thread": thread,
                    "ledger": str(tmp_path / f"{thread}.ledger"),
                    "result": str(result),
                    "fresh": not exists,
                    "durability": DURABILITIES[threads % len(DURABILITIES)],
                }
                outcome = launcher.run(args, delay)
                store.settle()
                step = _check_chat(reader, thread, expected, committed)
                exists = step >= 0
                if outcome.killed:
                    kills += 1
                    killed_at.append(step)
                    continue
                assert outcome.exit_code == 0, f"child {outcome.describe()}"
                assert json.loads(result.read_text())["messages"] == expected
                assert _anchors(store, thread) != 0, "the chain was linked through anchors"
                break
    except AssertionError as exc:
        raise AssertionError(f"[{store.backend}, PLAIT_CRASH_SEED={seed}] {exc}") from exc
    finally:
        run_sync(reader.aclose())
    print(f"\n[{store.backend}] seed {seed}: {kills} kills over {threads} chat threads, heads at {killed_at}")
    assert any(17 <= step < crash_child.CHAT_STEPS for step in killed_at), "no kill landed past the first anchor"
