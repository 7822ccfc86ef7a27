"""The SQLite store's worker threads (plait.checkpoint.sqlite._worker): jobs are functions of
the connection, run in order; queued jobs without one are folded into one call of the
worker's fold (the store's group commit); a job runs on the caller's thread only while the
worker is idle."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from plait.checkpoint.sqlite._worker import Job, Worker
from plait.errors import CheckpointError


class Done:
    """What each job ended with, in the order the jobs ended."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, Any, BaseException | None]] = []
        self.all = threading.Event()
        self.expected = 0

    def job(self, name: str, fn: Any = None, item: Any = None) -> Job:
        self.expected += 1

        def done(result: Any, error: BaseException | None) -> None:
            self.ended.append((name, result, error))
            if len(self.ended) == self.expected:
                self.all.set()

        return Job(fn, item, done)


class Folds:
    """A fold that records the items of each call and refuses the item ``"bad"``."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    def __call__(self, conn: sqlite3.Connection, items: list[Any]) -> Sequence[BaseException | None]:
        conn.execute("SELECT 1").fetchall()  # runs on the worker's connection
        self.calls.append(list(items))
        return [ValueError(item) if item == "bad" else None for item in items]


def _open() -> sqlite3.Connection:
    return sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)


@pytest.fixture
def folds() -> Folds:
    return Folds()


@pytest.fixture
def worker(folds: Folds) -> Iterator[Worker]:
    w = Worker("plait-test-worker", _open, "test store", 1000, fold=folds)
    w.ready.wait(5)
    yield w
    w.stop()


def _hold(worker: Worker, done: Done) -> threading.Event:
    """Keep ``worker`` busy until the returned event is set, so that what is put next queues."""
    release, started = threading.Event(), threading.Event()

    def busy(conn: sqlite3.Connection) -> str:
        started.set()
        release.wait(5)
        return "held"

    worker.put(done.job("hold", busy))
    started.wait(5)
    return release


def test_queued_jobs_without_a_function_are_folded_into_one_call_in_order(worker: Worker, folds: Folds) -> None:
    done = Done()
    release = _hold(worker, done)
    for name in ("c1", "c2", "c3"):
        worker.put(done.job(name, item=name))
    worker.put(done.job("read", lambda conn: conn.execute("SELECT 41 + 1").fetchone()[0]))
    for name in ("c4", "c5"):
        worker.put(done.job(name, item=name))
    release.set()
    assert done.all.wait(5)
    assert folds.calls == [["c1", "c2", "c3"], ["c4", "c5"]], "a job with a function of its own ends a group"
    assert [name for name, _, _ in done.ended] == ["hold", "c1", "c2", "c3", "read", "c4", "c5"]
    assert ("read", 42, None) in done.ended


def test_an_item_its_fold_refuses_fails_alone(worker: Worker, folds: Folds) -> None:
    done = Done()
    release = _hold(worker, done)
    for name in ("ok1", "bad", "ok2"):
        worker.put(done.job(name, item=name))
    release.set()
    assert done.all.wait(5)
    assert folds.calls == [["ok1", "bad", "ok2"]]
    errors = {name: error for name, _, error in done.ended}
    assert errors["ok1"] is None and errors["ok2"] is None
    assert isinstance(errors["bad"], ValueError)


def test_a_job_runs_on_the_callers_thread_only_while_the_worker_is_idle(worker: Worker) -> None:
    ran, where = worker.inline(lambda conn: threading.get_ident())
    assert ran and where == threading.get_ident()
    done = Done()
    release = _hold(worker, done)
    try:
        assert worker.inline(lambda conn: threading.get_ident()) == (False, None), "busy: the job is queued"
    finally:
        release.set()
    assert done.all.wait(5)


def test_what_sqlite_raises_is_said_as_the_stores_error(worker: Worker) -> None:
    with pytest.raises(CheckpointError, match="test store"):
        worker.inline(lambda conn: conn.execute("SELECT * FROM no_such_table"))
    done = Done()
    worker.put(done.job("queued", lambda conn: conn.execute("SELECT * FROM no_such_table")))
    assert done.all.wait(5)
    ((_, _, error),) = done.ended
    assert isinstance(error, CheckpointError) and "test store" in str(error)
