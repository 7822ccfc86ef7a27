"""What the reading commands show of a thread: ``state`` says how the thread stands and why
it failed, ``diff`` shows only what differs, ``db migrate`` says when it created the store."""

from __future__ import annotations

import json
from typing import Any

from plait.cli import EXIT_FAILED, EXIT_OK

from ._cli_support import Cli


def test_state_shows_the_status_and_the_stored_error(cli: Cli, validate: Any) -> None:
    assert cli("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "tb", "--db", "t.db").code == EXIT_FAILED
    res = cli("state", "tb", "--db", "t.db")
    assert res.code == EXIT_OK, res.err
    assert "status: error" in res.out.splitlines()
    assert "error: node 'check' failed: ValueError: bad topic" in res.out.splitlines()
    data = cli("state", "tb", "--db", "t.db", "--json").json()
    validate("state", data)
    assert data["status"] == "error"
    [error] = data["errors"]
    assert error["node"] == "check" and error["message"] == "bad topic" and "ValueError" in error["traceback"]


def test_state_of_a_finished_thread_is_idle_with_no_error(cli: Cli, validate: Any) -> None:
    assert cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "ok", "--db", "t.db").code == EXIT_OK
    res = cli("state", "ok", "--db", "t.db")
    assert "status: idle" in res.out.splitlines() and "error:" not in res.out
    data = cli("state", "ok", "--db", "t.db", "--json").json()
    validate("state", data)
    assert data["status"] == "idle" and data["errors"] == []


def test_diff_prints_the_items_that_differ_not_both_lists(cli: Cli) -> None:
    shared = [f"turn {i}" for i in range(40)]
    for thread, topic in (("a", "x"), ("b", "y")):
        data = json.dumps({"log": shared, "topic": topic})
        assert cli("run", "flow.py:graph", "-i", data, "-t", thread, "--db", "t.db").code == EXIT_OK
    res = cli("diff", "a", "b", "--db", "t.db")
    assert res.code == EXIT_OK, res.err
    assert "turn 3" not in res.out and "checked" not in res.out  # what both have is not repeated
    only_a, only_b = res.out.index("~ log: 1 item only in a:"), res.out.index("~ log: 1 item only in b:")
    assert '"hello x"' in res.out[only_a:only_b] and '"hello y"' in res.out[only_b:]
    assert "~ topic:" in res.out and '"a": "x"' in res.out and '"b": "y"' in res.out
    assert len(res.out.splitlines()) < 20


def test_db_migrate_says_when_it_created_the_store(cli: Cli, validate: Any) -> None:
    res = cli("db", "migrate", "--db", "new.db")
    assert res.code == EXIT_OK, res.err
    assert res.out.strip() == "new.db: created a new store with the current schema"
    res = cli("db", "migrate", "--db", "new.db")
    assert res.out.strip() == "new.db: schema up to date"
    data = cli("db", "migrate", "--db", "other.db", "--json").json()
    validate("db-migrate", data)
    assert data["created"] is True
    assert cli("db", "migrate", "--db", "other.db", "--json").json()["created"] is False
