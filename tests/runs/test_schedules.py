"""Cron schedules: stored by plait, fired by one deduplicated periodic job, exactly one run per
tick with four `plait worker` processes serving the queue."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import psycopg
import pytest

from plait.errors import ScheduleNotFoundError
from plait.runs import Runs
from plait.runs._db import connect_kwargs
from plait.runs.schedules import SUBMIT_KEY, fire_due, ticks

from . import _run_flows as flows
from ._runs_support import WorkerProcess, started, wait_for

pytestmark = pytest.mark.postgres

TICKS = 5


def test_ticks_are_the_cron_times_after_the_last_one_and_a_catch_up_is_bounded() -> None:
    assert ticks("* * * * * */2", 100, 107) == [102, 104, 106]
    assert ticks("* * * * * *", 100, 100) == []
    assert ticks("* * * * * *", 0, 1000, limit=3) == [998, 999, 1000]


@pytest.mark.slow
def test_four_workers_fire_each_tick_of_a_one_second_schedule_exactly_once(
    runs_db: tuple[str, str], workers: Callable[..., WorkerProcess]
) -> None:
    dsn, schema = runs_db
    procs = [workers() for _ in range(4)]
    for p in procs:
        wait_for(functools.partial(started, p.log), 30, "the workers to start")
    with Runs(dsn, schema=schema) as runs:
        schedule_id = runs.schedule(flows.name("single"), "* * * * * *", {"tag": "cron"})
        made = time.time()
        wait_for(lambda: len(runs.list(limit=None)) >= TICKS, 30, f"{TICKS} scheduled runs", pause=0.05)
        runs.unschedule(schedule_id)
        assert runs.schedules() == []
        with pytest.raises(ScheduleNotFoundError):
            runs.unschedule(schedule_id)
        fired = runs.list(limit=None)
        done = [runs.join(r.run_id, timeout=30) for r in fired]
    tick_list = sorted(r.tick for r in fired if r.tick is not None)
    assert len(tick_list) == len(fired) and len(set(tick_list)) == len(tick_list)  # one run per tick
    assert tick_list == list(range(tick_list[0], tick_list[0] + len(tick_list)))  # no tick missed
    assert tick_list[0] > made - 1
    assert {r.schedule_id for r in fired} == {schedule_id}
    assert all(r.status == "success" for r in done)
    assert all(r.thread_id == f"{schedule_id}:{r.tick}" for r in fired)
    with psycopg.connect(dsn, **connect_kwargs(schema)) as conn:  # Procrastinate deferred one fire job a tick
        rows = conn.execute(
            "SELECT periodic_id, defer_timestamp, count(*) FROM procrastinate_periodic_defers "
            "GROUP BY 1, 2 HAVING count(*) > 1"
        ).fetchall()
    assert rows == []


def test_a_bad_cron_is_refused_and_schedules_are_listed(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    with Runs(dsn, schema=schema) as runs:
        with pytest.raises(ValueError, match="not a cron expression"):
            runs.schedule(flows.name("single"), "every minute")
        a = runs.schedule(flows.name("single"), "*/5 * * * *", {"tag": "a"}, thread_id="same")
        listed = runs.schedules()
        assert [s.schedule_id for s in listed] == [a]
        assert listed[0].cron == "*/5 * * * *" and listed[0].thread_id == "same" and listed[0].input == {"tag": "a"}


def test_a_schedule_carries_what_its_runs_are_submitted_with_in_its_metadata(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    carried = {
        "metadata": {"cron_id": "c1"},
        "context": {"model": "small"},
        "options": {"wire": {"modes": ["updates"], "subgraphs": False}, "durability": "exit"},
    }
    with Runs(dsn, schema=schema) as runs:
        runs.schedule(flows.name("single"), "* * * * *", {"tag": "x"}, metadata={SUBMIT_KEY: carried, "shown": 1})
        runs.schedule(flows.name("single"), "* * * * *", {"tag": "y"}, metadata={"plain": True})
        # the first minute after the later schedule's creation: one tick of each, whatever
        # second of the minute they were made in
        first = max(s.last_tick or 0 for s in runs.schedules()) // 60 * 60 + 60
        assert runs._sync(fire_due(runs, first)) == 2
        fired = {r.input["tag"]: r for r in runs.list(limit=None)}
    assert fired["x"].metadata == {"cron_id": "c1"} and fired["x"].context == {"model": "small"}
    assert fired["x"].options == {"wire": {"modes": ["updates"], "subgraphs": False}, "durability": "exit"}
    assert fired["y"].metadata == {"plain": True} and fired["y"].options is None
