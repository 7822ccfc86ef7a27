"""``plait threads``: the status column, and the listing filtered by status, time and count,
called in-process (``main(argv)``) on a SQLite file."""

from __future__ import annotations

import datetime
import json
import pathlib
import time

import pytest

from plait.cli import EXIT_OK, EXIT_USAGE, main
from plait.cli.arguments import parse_metadata, parse_since
from plait.errors import ArgumentError

from ._cli_support import FLOW


@pytest.fixture
def store(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """t.db with three threads: ok (idle), bad (error), asked (interrupted), written in that order."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flow.py").write_text(FLOW)
    assert main(["run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "ok", "--db", "t.db", "--json"]) == 0
    assert main(["run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "bad", "--db", "t.db", "--json"]) == 1
    assert main(["run", "flow.py:with_question", "-i", '{"topic": "x"}', "-t", "asked", "--db", "t.db", "--json"]) == 3
    return "t.db"


def listed(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    capsys.readouterr()
    assert main(["threads", "--db", "t.db", "--json", *args]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list)
    return rows


def test_threads_show_how_each_stands(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows = listed(capsys)
    assert [(r["thread_id"], r["status"]) for r in rows] == [("asked", "interrupted"), ("bad", "error"), ("ok", "idle")]
    capsys.readouterr()
    assert main(["threads", "--db", "t.db"]) == EXIT_OK
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:2] == ["thread", "status"]
    assert table[2].split()[:2] == ["asked", "interrupted"]


def test_threads_filter_by_status_and_limit(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert [r["thread_id"] for r in listed(capsys, "--status", "error")] == ["bad"]
    assert [r["thread_id"] for r in listed(capsys, "--status", "busy")] == []
    assert [r["thread_id"] for r in listed(capsys, "--limit", "2")] == ["asked", "bad"]
    capsys.readouterr()
    assert main(["threads", "--db", "t.db", "--status", "running"]) == EXIT_USAGE
    assert "--status is one of idle, busy, interrupted, error, ready, stale" in capsys.readouterr().err


def test_threads_since_keeps_those_that_moved_since(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    rows = listed(capsys)
    # an ISO 8601 time with its zone (as the JSON gives them): half-way between two threads' moves
    newest, second = (datetime.datetime.fromisoformat(str(r["updated_at"])) for r in rows[:2])
    assert newest > second
    middle = second + (newest - second) / 2
    assert [r["thread_id"] for r in listed(capsys, "--since", middle.isoformat())] == ["asked"]
    assert [r["thread_id"] for r in listed(capsys, "--since", "1h")] == ["asked", "bad", "ok"]
    assert [r["thread_id"] for r in listed(capsys, "--since", "1h", "--limit", "1")] == ["asked"]
    assert listed(capsys, "--since", "2999-01-01") == []


def test_since_reads_spans_and_iso_times() -> None:
    assert parse_since("90s", now=1000.0) == 910.0
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("1.5d", now=200_000.0) == 200_000.0 - 129_600
    assert parse_since("2025-01-31T12:00:00+00:00") == 1738324800.0
    assert parse_since(None) is None
    local = time.mktime((2025, 1, 31, 0, 0, 0, 0, 0, -1))
    assert parse_since("2025-01-31") == local  # no zone: local time, as the tables show
    with pytest.raises(ArgumentError, match="--since takes a span"):
        parse_since("yesterday")


def test_threads_filter_by_the_heads_metadata(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    # ok ran greet and check (its head is step 2); bad and asked rest after greet (step 1)
    assert [r["thread_id"] for r in listed(capsys, "--metadata", "step=2")] == ["ok"]
    assert [r["thread_id"] for r in listed(capsys, "-m", "step=1")] == ["asked", "bad"]
    assert [r["thread_id"] for r in listed(capsys, "-m", 'step="1"')] == []  # JSON text: the string "1"
    assert [r["thread_id"] for r in listed(capsys, "-m", "step=1", "--status", "error")] == ["bad"]
    assert [r["thread_id"] for r in listed(capsys, "-m", "step=1", "-m", "source=loop", "-n", "1")] == ["asked"]
    assert [r["thread_id"] for r in listed(capsys, "-m", 'writes={"greet": ["log"]}')] == ["asked", "bad"]
    assert [r["thread_id"] for r in listed(capsys, "-m", "source=nobody")] == []
    capsys.readouterr()
    assert main(["threads", "--db", "t.db", "-m", "source=nobody", "-m", "step=1"]) == EXIT_OK
    assert 'no threads in t.db (metadata source="nobody", metadata step=1)' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-m", "step"], "--metadata takes KEY=VALUE"),
        (["-m", "=1"], "--metadata takes KEY=VALUE"),
        (["-m", "step=1", "-m", "step=2"], "--metadata gives 'step' twice"),
    ],
)
def test_threads_metadata_that_is_not_key_value_is_a_usage_error(
    store: str, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    capsys.readouterr()
    assert main(["threads", "--db", "t.db", *args]) == EXIT_USAGE
    assert needle in capsys.readouterr().err


def test_metadata_values_are_json_else_text() -> None:
    assert parse_metadata(None) is None
    assert parse_metadata(["user=ada", "n=1", "ok=true", "none=null", 'run={"a": [1]}', "x=NaN", "e="]) == {
        "user": "ada",
        "n": 1,
        "ok": True,
        "none": None,
        "run": {"a": [1]},
        "x": "NaN",
        "e": "",
    }
    assert parse_metadata(["url=http://x/?a=b"]) == {"url": "http://x/?a=b"}
