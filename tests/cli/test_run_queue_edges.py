"""The run commands' edges a user met: a cron written seconds first, a graph or queue no
worker serves, ``--after`` (and ``--delay``, its old name). Run for real, through the
console script, on a scratch PostgreSQL schema, with a real `plait worker` where one is meant."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from plait.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from plait.runs import Runs

from ..runs import _run_flows as flows
from ._cli_support import Cli

pytestmark = pytest.mark.postgres

Validate = Callable[[str, Any], None]


@pytest.fixture
def db(postgres_dsn: str, postgres_schema: str) -> tuple[str, ...]:
    """The run commands' ``--db``/``--schema`` of a scratch schema with the run tables."""
    runs = Runs(postgres_dsn, schema=postgres_schema)
    runs.migrate()
    runs.close()
    return ("--db", postgres_dsn, "--schema", postgres_schema)


def _times(texts: list[str]) -> list[datetime.datetime]:
    times = [datetime.datetime.fromisoformat(t) for t in texts]
    assert all(t.utcoffset() == datetime.timedelta(0) for t in times) and times == sorted(times)
    return times


def test_schedule_prints_its_next_fires_and_warns_of_a_seconds_first_cron(
    cli: Cli, validate: Validate, db: tuple[str, ...]
) -> None:
    single = flows.name("single")
    res = cli("schedule", single, "--cron", "*/5 * * * *", "-i", "{}", *db, "--json")
    assert res.code == EXIT_OK, res.err
    validate("schedule", res.json())
    fires = _times(res.json()["next"])
    assert all(t.minute % 5 == 0 and t.second == 0 for t in fires)
    assert [(b - a).total_seconds() for a, b in zip(fires, fires[1:], strict=False)] == [300, 300]
    assert "six fields" not in res.err

    # Quartz's "every five minutes": as plait reads six fields, every second of minute 0 of
    # every fifth hour. Stored (it is a valid cron), with a warning saying what to write.
    res = cli("schedule", single, "--cron", "0 */5 * * * *", "-i", "{}", *db)
    assert res.code == EXIT_OK, res.err
    warning = next(line for line in res.err.splitlines() if "six fields" in line)
    assert warning.startswith("warning: cron '0 */5 * * * *' has six fields")
    assert "seconds last" in warning and "60 runs in a row" in warning and "write '*/5 * * * *' instead" in warning
    shown = res.out.splitlines()[1]
    assert shown.startswith("  next fires (UTC): ")
    fires = _times(shown.split(": ", 1)[1].split(", "))
    assert all(t.minute == 0 and t.hour % 5 == 0 for t in fires)
    crons = [s["cron"] for s in cli("schedules", *db, "--json").json()]
    assert crons == ["*/5 * * * *", "0 */5 * * * *"]

    # Seconds last, as plait means them: no warning. Seconds first with a fixed second: the
    # six-field spelling plait reads is suggested.
    res = cli("schedule", single, "--cron", "30 * * * * 0", *db)
    assert res.code == EXIT_OK and "six fields" not in res.err
    res = cli("schedule", single, "--cron", "15 */10 * * * *", *db)
    assert "write '*/10 * * * * 15' instead" in res.err

    # Quartz's "?" and weekday names in the sixth field do not parse: refused, with the fix.
    res = cli("schedule", single, "--cron", "0 0 12 ? * MON-FRI", *db)
    assert res.code == EXIT_USAGE
    assert "if the seconds come first (Quartz, APScheduler), write '0 12 * * MON-FRI'" in res.one_line()
    assert len(cli("schedules", *db, "--json").json()) == 4
    table = cli("schedules", *db).out
    assert "next tick (UTC)" in table
    every_five = next(line for line in table.splitlines() if "  */5 * * * *  " in line)
    assert _times([every_five.rsplit("  ", 1)[1].replace(" ", "T") + "+00:00"])[0].minute % 5 == 0


def test_python_schedule_warns_of_a_seconds_first_cron(postgres_dsn: str, db: tuple[str, ...]) -> None:
    from plait.runs.cron import CronFieldsWarning, next_fires

    runs = Runs(postgres_dsn, schema=db[-1])
    try:
        with pytest.warns(CronFieldsWarning, match=r"write '\*/5 \* \* \* \*' instead") as caught:
            runs.schedule(flows.name("single"), "0 */5 * * * *")
        assert caught[0].filename == __file__  # points at the caller, not at plait's loop
    finally:
        runs.close()
    start = datetime.datetime(2030, 1, 1, 0, 0, 30, tzinfo=datetime.UTC)
    assert [t.isoformat() for t in next_fires("0 */5 * * * *", 2, start)] == [
        "2030-01-01T00:00:31+00:00",
        "2030-01-01T00:00:32+00:00",
    ]


def test_submit_and_schedule_warn_when_no_live_worker_serves_the_graph(
    cli: Cli, db: tuple[str, ...], worker: Callable[..., None]
) -> None:
    single = flows.name("single")
    res = cli("submit", single, "-i", "{}", *db)
    assert res.code == EXIT_OK and res.out.startswith("submitted run ")
    assert f"warning: no worker is running on this database, so runs of {single} wait in the queue" in res.err
    assert f"Start one that serves it with: plait worker --graph {single} --db " in res.err
    assert f"--schema {db[-1]}" in res.err
    res = cli("schedule", single, "--cron", "0 0 1 1 *", *db)
    assert res.code == EXIT_OK and "warning: no worker is running on this database" in res.err

    worker()
    done = cli("submit", single, "-i", "{}", "--wait", "60", *db, "--json")
    assert done.code == EXIT_OK and done.err == "" and done.json()["status"] == "success"
    assert cli("schedule", single, "--cron", "0 0 1 1 *", *db).err == ""

    res = cli("submit", "elsewhere.py:graph", "-i", "{}", *db)
    assert res.code == EXIT_OK
    assert "warning: no live worker on queue 'plait' serves graph 'elsewhere.py:graph' (they serve: " in res.err
    assert "so one of them will fail its runs with UnknownGraphError" in res.err
    assert single in res.err and "plait worker --graph elsewhere.py:graph --db" in res.err
    res = cli("schedule", "digest", "--cron", "0 9 * * *", *db)  # a plain name: the worker needs its target
    assert res.code == EXIT_OK and "plait worker --graph digest=MODULE:GRAPH --db" in res.err
    res = cli("submit", single, "-i", "{}", "--queue", "slow", *db)
    assert res.code == EXIT_OK
    assert "warning: no live worker serves queue 'slow' (the 1 live worker(s) serve: plait), so runs" in res.err
    assert f"plait worker --graph {single} --queue slow --db" in res.err

    worker("--queue", "slow")
    assert cli("submit", single, "-i", "{}", "--queue", "slow", "--wait", "60", *db).err == ""

    # An answer to a thread that waits for none: the worker fails the run, and the command
    # says what to run in its own words, not the library's Python advice.
    assert cli("submit", single, "-t", "idle", "-i", "{}", "--wait", "60", *db).code == EXIT_OK
    res = cli("submit", single, "-t", "idle", "--resume", '"yes"', "--wait", "60", *db)
    assert res.code == EXIT_FAILED and "InvalidResumeError: thread 'idle' has no interrupt waiting" in res.out
    assert f"run it again with new input: plait submit {single} -t idle --input JSON --db " in res.out
    assert "invoke(" not in res.out + res.err


def test_submit_after_takes_seconds_or_a_time(cli: Cli, postgres_dsn: str, db: tuple[str, ...]) -> None:
    def scheduled_at(run_id: str) -> datetime.datetime:
        with psycopg.connect(postgres_dsn, options=f"-csearch_path={db[-1]}") as conn:
            row = conn.execute(
                "SELECT j.scheduled_at FROM plait_run r JOIN procrastinate_jobs j ON j.id = r.job_id "
                "WHERE r.run_id = %s",
                (run_id,),
            ).fetchone()
        assert row is not None
        when: datetime.datetime = row[0]
        return when

    single = flows.name("single")
    at = "2030-01-02T03:04:05+00:00"
    run = cli("submit", single, "-i", "{}", "--after", at, *db, "--json").json()
    assert run["status"] == "pending" and scheduled_at(run["run_id"]) == datetime.datetime.fromisoformat(at)
    before = datetime.datetime.now(datetime.UTC)
    for option in ("--after", "--delay"):  # --delay: the old name, hidden from --help
        run = cli("submit", single, "-i", "{}", option, "3600", *db, "--json").json()
        wait = (scheduled_at(run["run_id"]) - before).total_seconds()
        assert 3600 <= wait < 3600 + 120
    assert "--delay" not in cli("submit", "--help").out
    for args in (
        ("--after", "tomorrow"),
        ("--after", "2030-01-02T03:04:05"),
        ("--after", "inf"),
        ("--after", "5", "--delay", "5"),
    ):
        res = cli("submit", single, *args, *db)
        assert res.code == EXIT_USAGE and "--after" in res.one_line()


def test_db_migrate_says_it_created_a_new_postgres_store(cli: Cli, postgres_dsn: str, postgres_schema: str) -> None:
    dsn = f"{postgres_dsn}?options=-csearch_path%3D{postgres_schema}"
    res = cli("db", "migrate", "--db", dsn)
    assert res.code == EXIT_OK, res.err
    assert "created a new store with the current schema; run tables and job queue set up" in res.out
    res = cli("db", "migrate", "--db", dsn)
    assert "schema up to date; run tables and job queue up to date" in res.out
    assert cli("db", "migrate", "--db", dsn, "--json").json()["created"] is False
