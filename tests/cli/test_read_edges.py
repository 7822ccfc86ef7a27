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


CHAT = """
import os
from plait import END, START, AppendMessages, Graph, StateSchema

schema = StateSchema.builder().add("messages", AppendMessages()).build()


def bot(state):
    return {"messages": [{"role": "assistant", "content": f"answer from process {os.getpid()}"}]}


graph = Graph(schema)
graph.add_node("bot", bot).add_edge(START, "bot").add_edge("bot", END)
"""


def test_a_fork_nobody_ran_is_ready_not_stale_and_its_answers_get_ids_of_their_own(cli: Cli) -> None:
    """``stale`` lists runs that died, never a fork; and after both branches ran, the diff
    sees one answer on each side, not one message "with one id and different content"."""
    cli.write("chat.py", CHAT)
    hi = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    assert cli("run", "chat.py:graph", "-i", hi, "-t", "a", "--db", "c.db").code == EXIT_OK
    assert cli("fork", "a", "--to", "b", "--step", "0", "--db", "c.db").code == EXIT_OK
    ready = cli("threads", "--status", "ready", "--db", "c.db", "--json").json()
    assert [(t["thread_id"], t["status"]) for t in ready] == [("b", "ready")]
    assert cli("threads", "--status", "stale", "--db", "c.db", "--json").json() == []
    assert "b       ready" in cli("threads", "--db", "c.db").out
    assert cli("resume", "chat.py:graph", "b", "--db", "c.db").code == EXIT_OK  # another process: another answer
    res = cli("diff", "a", "b", "--db", "c.db")
    assert res.code == EXIT_OK, res.err
    assert "~ messages: 1 message only in a:" in res.out and "~ messages: 1 message only in b:" in res.out
    assert "with one id and different content" not in res.out
