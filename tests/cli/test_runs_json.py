"""The run commands' --json holds to docs/cli-schemas/ (submit, runs, run-cancel, schedule,
schedules, schedules --remove), run for real on a scratch PostgreSQL schema with a real
`plait worker` taking the runs to their statuses: every time ISO 8601 UTC, a cron tick too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from plait.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from plait.runs import Runs

from ..runs import _run_flows as flows
from ..runs._runs_support import wait_for
from ._cli_support import Cli

pytestmark = pytest.mark.postgres

Validate = Callable[[str, Any], None]
TIMES = ("created_at", "started_at", "finished_at", "updated_at", "tick", "last_tick")


def test_the_run_commands_json_holds_to_their_schemas(
    cli: Cli, validate: Validate, postgres_dsn: str, postgres_schema: str, worker: Callable[[], None]
) -> None:
    db = ("--db", postgres_dsn, "--schema", postgres_schema)

    def ok(name: str, *args: str, code: int = EXIT_OK) -> Any:
        res = cli(*args, *db, "--json")
        assert res.code == code, (args, res.err)
        data = res.json()
        validate(name, data)
        for record in data if isinstance(data, list) else [data]:
            for key in TIMES:
                if record.get(key) is not None:
                    assert record[key].endswith("+00:00") and "T" in record[key], (key, record)
        return data

    # The run tables as tests/runs set them up; the worker makes the checkpoint tables, named
    # by --schema as every command here names them (test_json.py holds `db migrate --json`).
    runs = Runs(postgres_dsn, schema=postgres_schema)
    runs.migrate()
    runs.close()
    worker()

    done = ok("submit", "submit", flows.name("single"), "-t", "s", "-i", "{}", "--wait", "60")
    assert done["status"] == "success" and done["output"]["log"] == ["one"] and done["worker"]
    failed = ok("submit", "submit", flows.name("failing"), "-t", "f", "-i", "{}", "--wait", "60", code=EXIT_FAILED)
    assert failed["status"] == "error" and failed["error"]["type"] == "NodeError"
    asked = ok("submit", "submit", flows.name("asking"), "-t", "a", "-i", "{}", "--wait", "60", code=EXIT_INTERRUPTED)
    assert asked["status"] == "interrupted" and asked["output"]["__interrupt__"]
    later = ok(
        "submit", "submit", flows.name("single"), "-t", "p", "--after", "3600", "--priority", "2", "--timeout", "30",
        "--multitask", "enqueue", "-i", '{"tag": "x"}',
    )  # fmt: skip
    assert later["status"] == "pending" and later["started_at"] is None and later["timeout"] == 30
    newest_first = [later["run_id"], asked["run_id"], failed["run_id"], done["run_id"]]

    assert [r["run_id"] for r in ok("runs", "runs")] == newest_first
    assert [r["run_id"] for r in ok("runs", "runs", "--status", "error")] == [failed["run_id"]]
    assert ok("runs", "runs", "--thread", "nobody") == []
    assert [r["run_id"] for r in ok("runs", "runs", "-n", "2", "--before", newest_first[1])] == newest_first[2:]

    assert ok("run-cancel", "run-cancel", later["run_id"]) == {"run_id": later["run_id"], "cancelled": True}
    assert ok("run-cancel", "run-cancel", later["run_id"])["cancelled"] is False
    assert ok("runs", "runs", "--status", "cancelled")[0]["error"]["type"] == "Cancelled"

    # A schedule firing every second: its runs carry their tick, as a time like the others.
    every = ok("schedule", "schedule", flows.name("single"), "--cron", "* * * * * *", "-t", "ticks", "-i", "{}")
    every = every["schedule_id"]
    yearly = ok("schedule", "schedule", flows.name("single"), "--cron", "0 0 1 1 *", "-i", "{}")["schedule_id"]
    listed = ok("schedules", "schedules")
    assert [s["schedule_id"] for s in listed] == [every, yearly]
    assert listed[0]["thread_id"] == "ticks" and listed[1]["thread_id"] is None

    def ticked() -> bool:
        res = cli("runs", "--thread", "ticks", *db, "--json")
        return res.code == EXIT_OK and bool(res.json())

    wait_for(ticked, 60, "the schedule's first run", pause=0.2)
    fired = ok("runs", "runs", "--thread", "ticks")
    assert fired[0]["schedule_id"] == every and fired[0]["tick"].endswith(".000000+00:00")
    assert ok("schedules-remove", "schedules", "--remove", every) == {"schedule_id": every, "removed": True}
    assert [s["schedule_id"] for s in ok("schedules", "schedules")] == [yearly]

    for args in (("run-cancel", "no-such-run"), ("schedules", "--remove", "no-such-schedule")):
        res = cli(*args, *db, "--json")
        assert res.code == EXIT_USAGE and res.out == ""
        err = res.error()
        validate("error", err)
        assert err["error"] in ("RunNotFoundError", "ScheduleNotFoundError") and err["exit_code"] == EXIT_USAGE


def test_submit_answers_an_interrupted_thread_through_the_workers(
    cli: Cli, postgres_dsn: str, postgres_schema: str, worker: Callable[[], None]
) -> None:
    db = ("--db", postgres_dsn, "--schema", postgres_schema)
    runs = Runs(postgres_dsn, schema=postgres_schema)
    runs.migrate()
    runs.close()
    worker()
    for thread, answer in (("r", ("--resume", '"yes"')), ("c", ("--command", '{"resume": "sure"}'))):
        res = cli("submit", flows.name("asking"), "-t", thread, "-i", "{}", "--wait", "60", *db, "--json")
        assert res.code == EXIT_INTERRUPTED, res.err
        res = cli(
            "submit", flows.name("asking"), "-t", thread, *answer, "--context", '{"user": "ann"}', "--wait", "60",
            *db, "--json",
        )  # fmt: skip
        assert res.code == EXIT_OK, res.err
        run = res.json()
        assert run["status"] == "success" and run["context"] == {"user": "ann"}
        assert run["output"]["answer"] == ("yes" if thread == "r" else "sure")
    res = cli("submit", flows.name("asking"), "-t", "x", "--command", '{"resum": 1}', *db)
    assert res.code == EXIT_USAGE and "--command is a JSON object of resume, update, goto" in res.one_line()
    res = cli("submit", flows.name("asking"), "-t", "x", "--resume", "1", "--command", '{"resume": 2}', *db)
    assert res.code == EXIT_USAGE and "give the answer once" in res.one_line()
