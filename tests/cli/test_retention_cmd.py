"""``plait db retention`` (store, show, remove the policy every process sweeps by), ``plait db
sweep`` applying it (no question asked, busy threads listed, exit 0) and ``plait db stats``
showing it, on SQLite, the file store and PostgreSQL; every ``--json`` output held to its
schema. The store's clock (``Checkpointer.store_time``, what idleness is measured by) is
set ten days ahead for the commands, so the threads just written are idle that long."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from plait import END, START, AppendList, Checkpointer, Graph, StateSchema
from plait.checkpoint import FileCheckpointer, PostgresCheckpointer, SqliteCheckpointer
from plait.cli import EXIT_OK, EXIT_USAGE, main

Validate = Callable[[str, Any], None]


@pytest.fixture(autouse=True)
def ten_days_later(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Checkpointer, "store_time", lambda self: time.time() + 10 * 86400)


def _write_threads(cp: Checkpointer, *thread_ids: str) -> None:
    g = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("n", lambda s: {"log": ["n"]})
    app = g.add_edge(START, "n").add_edge("n", END).compile(cp)
    for tid in thread_ids:
        app.invoke({}, thread_id=tid)
        app.invoke({}, thread_id=tid)


class _Cli:
    def __init__(self, capsys: pytest.CaptureFixture[str], db: str) -> None:
        self.capsys, self.db = capsys, db

    def __call__(self, *args: str, code: int = EXIT_OK) -> str:
        self.capsys.readouterr()
        got = main([*args, "--db", self.db])
        captured = self.capsys.readouterr()
        assert got == code, captured.err
        return captured.out if code == EXIT_OK else captured.err

    def json(self, *args: str, code: int = EXIT_OK) -> Any:
        out = self(*args, "--json", code=code)
        return json.loads(out if code == EXIT_OK else out.strip().splitlines()[-1])


def _keys(found: list[dict[str, str]]) -> list[str]:
    return [k["thread_id"] for k in found]


def test_a_stored_policy_is_shown_applied_by_db_sweep_and_removed(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], validate: Validate
) -> None:
    db = str(tmp_path / "t.db")
    writer = SqliteCheckpointer(db)
    _write_threads(writer, "old", "held")
    writer.close()
    plait = _Cli(capsys, db)
    shown = plait.json("db", "retention")
    validate("db-retention", shown)
    assert shown["retention"] is None and shown["changed"] is False
    assert "retention: none" in plait("db", "stats")
    stored = plait.json("db", "retention", "--after", "7d", "--action", "keep_latest", "--no-keep-interrupted")
    validate("db-retention", stored)
    assert stored["retention"] == {"after": 7 * 86400, "action": "keep_latest", "keep_interrupted": False}
    stats = plait.json("db", "stats")
    validate("db-stats", stats)
    assert stats["retention"] == stored["retention"]
    assert "after 7d idle, keep only its head" in plait("db", "retention")
    plait.json("db", "retention", "--after", "1d")  # replaces it (delete, interrupted kept)
    reader = SqliteCheckpointer(db)
    lease = reader.take_lease("held", "a run")  # a run holds this one: skipped, listed
    try:
        dry = plait.json("db", "sweep", "--dry-run")
        validate("db-sweep", dry)
        assert dry["swept"] is None and dry["retention"]["dry_run"] is True
        assert _keys(dry["retention"]["deleted"]) == ["old"] and reader.get("old") is not None
        done = plait.json("db", "sweep")
        validate("db-sweep", done)
        assert _keys(done["retention"]["deleted"]) == ["old"]
        assert _keys(done["retention"]["skipped_busy"]) == ["held"]
        assert done["retention"]["policy"] == {"after": 86400, "action": "delete", "keep_interrupted": True}
        assert reader.get("old") is None and reader.get("held") is not None
        text = plait("db", "sweep")
        assert "skipped (busy): held" in text
    finally:
        reader.release_lease(lease)
        reader.close()
    removed = plait.json("db", "retention", "--off")
    assert (removed["retention"], removed["changed"]) == (None, True)
    nothing = plait.json("db", "sweep")
    assert nothing["retention"]["deleted"] == [] and nothing["retention"]["policy"] is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--after", "0"), "--after takes a span of time above zero"),
        (("--after", "soon"), "got 'soon'"),
        (("--after", "1d", "--action", "drop"), "--action is delete or keep_latest"),
        (("--action", "delete"), "--after is required"),
        (("--off", "--after", "1d"), "give it alone"),
    ],
)
def test_db_retention_refuses_what_is_not_a_policy(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], says: str
) -> None:
    SqliteCheckpointer(str(tmp_path / "t.db")).close()
    error = _Cli(capsys, str(tmp_path / "t.db")).json("db", "retention", *args, code=EXIT_USAGE)
    assert says in error["message"]


def test_the_file_store_keeps_its_policy_in_its_folder(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], validate: Validate
) -> None:
    folder = tmp_path / "files"
    writer = FileCheckpointer(folder)
    _write_threads(writer, "old")
    writer.close()
    plait = _Cli(capsys, folder.as_uri())
    plait.json("db", "retention", "--after", "2d")
    assert (folder / "retention-policy.json").exists()
    done = plait.json("db", "sweep")
    validate("db-sweep", done)
    assert done["swept"] is None and _keys(done["retention"]["deleted"]) == ["old"]


@pytest.mark.postgres
def test_the_commands_work_on_postgresql(
    postgres_dsn: str, postgres_schema: str, capsys: pytest.CaptureFixture[str], validate: Validate
) -> None:
    writer = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
    _write_threads(writer, "old")
    writer.close()
    db = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}options=-csearch_path%3D{postgres_schema}"
    plait = _Cli(capsys, db)
    validate("db-retention", plait.json("db", "retention", "--after", "3d", "--action", "keep_latest"))
    assert PostgresCheckpointer(postgres_dsn, schema=postgres_schema).get_stored_retention() is not None
    validate("db-stats", plait.json("db", "stats"))
    done = plait.json("db", "sweep")
    validate("db-sweep", done)
    assert _keys(done["retention"]["reduced"]) == ["old"] and done["retention"]["held_elsewhere"] is False
