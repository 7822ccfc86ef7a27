"""plait migrate: a graph's stored threads carried over to its version ahead of time; --dry-run
writes nothing, a busy thread is skipped and listed, a failed migration exits 1 and leaves its
thread as it was."""

from __future__ import annotations

import asyncio
import runpy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from plait import Command, SqliteCheckpointer
from plait.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

Validate = Callable[[str, Any], None]

FLOWS = """
    from plait import START, AppendList, Graph, StateSchema, interrupt

    def build(channel):
        schema = StateSchema.builder().add("log", AppendList()).add_lww(channel).build()
        g = Graph(schema).add_node("pre", lambda s: {"log": ["pre"], channel: "t"})
        g.add_node("ask", lambda s: {channel: s[channel] + ":" + interrupt("more?")})
        return g.add_edge(START, "pre").add_edge("pre", "ask")

    def rename(values):
        values["subject"] = values.pop("topic")
        return values

    def broken(values):
        raise ValueError("no topic here")

    v2 = build("subject").compile(name="asker", version=2, migrations={1: rename})
    bad = build("subject").compile(name="asker", version=2, migrations={1: broken})
    plain = build("topic").compile(name="asker")
"""


@pytest.fixture
def store(cli: Cli) -> Iterator[SqliteCheckpointer]:
    """t.db with three version-1 threads of ``asker``: ``paused`` (on its interrupt), ``done``
    (finished) and ``busy`` (paused, its lease held by this test while it runs)."""
    cli.write("flows.py", FLOWS)
    flows = runpy.run_path(str(cli.folder / "flows.py"))
    saver = SqliteCheckpointer(cli.folder / "t.db")
    app = flows["build"]("topic").compile(saver, name="asker")
    for t in ("paused", "done", "busy"):
        app.invoke({}, thread_id=t)
    app.invoke(Command(resume="z"), thread_id="done")
    yield saver
    asyncio.run(saver.aclose())


def heads(saver: SqliteCheckpointer) -> dict[str, dict[str, Any]]:
    return {
        t.thread_id: dict(cp.metadata)
        for t in asyncio.run(saver.alist_threads())
        if (cp := asyncio.run(saver.aget(t.thread_id))) is not None
    }


def test_dry_run_writes_nothing_and_all_migrates_every_thread_but_a_busy_one(
    cli: Cli, store: SqliteCheckpointer, validate: Validate
) -> None:
    lease = asyncio.run(store.atake_lease("busy", "a run"))
    before = heads(store)
    dry = cli("migrate", "flows.py:v2", "--dry-run", "--db", "t.db", "--json")
    assert dry.code == EXIT_OK, dry.err
    plan = dry.json()
    validate("migrate", plan)
    assert plan["dry_run"] is True and plan["migrated"] == 0 and plan["version"] == 2
    assert {t["thread_id"]: t["status"] for t in plan["threads"]} == {
        "paused": "would_migrate",
        "done": "would_migrate",
        "busy": "busy",
    }
    assert heads(store) == before

    res = cli("migrate", "flows.py:v2", "--all", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    done = res.json()
    validate("migrate", done)
    assert done["migrated"] == 2 and done["busy"] == ["busy"] and done["failed"] == 0
    after = heads(store)
    for t in ("paused", "done"):
        assert after[t]["source"] == "migrate" and (after[t]["migrated_from"], after[t]["migrated_to"]) == (1, 2)
    assert after["busy"] == before["busy"]
    assert {t["thread_id"]: t["checkpoint_id"] is not None for t in done["threads"]} == {
        "paused": True,
        "done": True,
        "busy": False,
    }

    asyncio.run(store.arelease_lease(lease))
    again = cli("migrate", "flows.py:v2", "--all", "--db", "t.db", "--json").json()
    assert [t["thread_id"] for t in again["threads"]] == ["busy"] and again["current"] == 2
    resumed = cli("resume", "flows.py:v2", "paused", "--resume", '"x"', "--db", "t.db", "--json")
    assert resumed.code == EXIT_OK, resumed.err
    assert resumed.json()["values"]["subject"] == "t:x"


def test_a_failed_migration_exits_1_and_leaves_the_thread_as_it_was(cli: Cli, store: SqliteCheckpointer) -> None:
    before = heads(store)
    res = cli("migrate", "flows.py:bad", "--thread", "paused", "--db", "t.db")
    assert res.code == EXIT_FAILED, res.err
    assert "failed paused (left unchanged)" in res.out and "ValueError: no topic here" in res.out
    assert heads(store) == before
    data = cli("migrate", "flows.py:bad", "--all", "--db", "t.db", "--json")
    assert data.code == EXIT_FAILED
    assert data.json()["failed"] == 3
    assert data.json()["threads"][0]["error"]["type"] == "GraphMigrationError"


def test_the_text_output_lists_what_was_migrated_and_what_was_skipped(cli: Cli, store: SqliteCheckpointer) -> None:
    lease = asyncio.run(store.atake_lease("busy", "a run"))
    res = cli("migrate", "flows.py:v2", "--all", "--db", "t.db")
    asyncio.run(store.arelease_lease(lease))
    assert res.code == EXIT_OK, res.err
    assert "migrated 2 threads of asker to version 2:" in res.out
    assert "  done: version 1 -> 2" in res.out and "  paused: version 1 -> 2" in res.out
    assert "skipped 1 busy thread" in res.out and "  busy" in res.out


def test_migrate_needs_a_choice_of_threads_and_a_known_thread(cli: Cli, store: SqliteCheckpointer) -> None:
    assert cli("migrate", "flows.py:v2", "--db", "t.db").code == EXIT_USAGE
    assert cli("migrate", "flows.py:v2", "--all", "--thread", "paused", "--db", "t.db").code == EXIT_USAGE
    assert cli("migrate", "flows.py:v2", "--thread", "nope", "--db", "t.db").code == EXIT_USAGE


def test_a_graph_without_a_version_has_nothing_to_migrate(cli: Cli, store: SqliteCheckpointer) -> None:
    res = cli("migrate", "flows.py:plain", "--all", "--db", "t.db")
    assert res.code == EXIT_OK, res.err
    assert "has no version" in res.out
