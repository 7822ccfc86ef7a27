"""``plait store`` (ls, get, put, search, rm) and ``plait db sweep`` on a SQLite file: values
from fields, JSON, files and stdin; namespaces spelled with dots; filters; semantic search
through the application's own index; every ``--json`` output held to its schema; and the
errors an operator meets, each with the command that helps. Called in-process (``main``)."""

from __future__ import annotations

import io
import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from plait import Store
from plait.checkpoint import SqliteCheckpointer
from plait.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

from ._cli_support import Cli

Validate = Callable[[str, Any], None]

APP = """
from plait import Store

def embed(texts):
    # a toy embedding: how often each of a, b, c occurs (never all zero)
    return [[t.count(c) + 0.01 for c in "abc"] for t in texts]

index = {"dims": 3, "embed": embed, "fields": ["text"]}
store = Store(index=index, ttl={"default_ttl": 30})
not_an_index = 42
"""


class Plait:
    """``plait ... --db t.db`` in-process, in a fresh folder: exit code, stdout, stderr."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys = capsys
        self.monkeypatch = monkeypatch

    def __call__(self, *args: str, stdin: str = "") -> tuple[int, str, str]:
        self.capsys.readouterr()
        self.monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main([*args, "--db", "t.db"])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def json(self, *args: str, code: int = EXIT_OK, stdin: str = "") -> Any:
        got, out, err = self(*args, "--json", stdin=stdin)
        assert got == code, err
        return json.loads(out) if code == EXIT_OK else json.loads(err.strip().splitlines()[-1])


@pytest.fixture
def plait(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Plait:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.py").write_text(APP)
    return Plait(capsys, monkeypatch)


def test_put_get_ls_search_rm(plait: Plait) -> None:
    code, out, _ = plait("store", "put", "users.u1", "prefs", "name=Ada", "age:=36", 'tags:=["x"]')
    assert code == EXIT_OK and out.strip() == "stored users.u1 prefs in t.db"
    assert plait("store", "put", "users.u2", "prefs", "--value", '{"name": "Bob", "profile": {"city": "Oslo"}}')[0] == 0
    assert plait("store", "put", "notes", "n1", "text=hello")[0] == 0
    code, out, _ = plait("store", "put", "users.u1", "prefs", "name=Ada", "age:=37")
    assert out.strip() == "replaced users.u1 prefs in t.db"

    got = plait.json("store", "get", "users.u1", "prefs")
    assert got["value"] == {"name": "Ada", "age": 37} and got["namespace"] == ["users", "u1"]
    assert got["created_at"] < got["updated_at"]  # an overwrite keeps when it was created
    code, out, _ = plait("store", "get", "users.u1", "prefs")
    assert out.startswith("users.u1 prefs (created ") and '"age": 37' in out

    code, out, _ = plait("store", "ls")
    assert out.splitlines() == ["notes", "users.u1", "users.u2"]
    assert plait.json("store", "ls", "users", "--max-depth", "1")["namespaces"] == [["users"]]
    assert plait.json("store", "ls", "--suffix", "u2")["namespaces"] == [["users", "u2"]]
    listed = plait.json("store", "ls", "users", "--items")["items"]
    assert [(i["namespace"], i["key"]) for i in listed] == [(["users", "u1"], "prefs"), (["users", "u2"], "prefs")]
    code, out, _ = plait("store", "ls", "--items")
    assert out.splitlines()[0] == "items (newest first)" and out.splitlines()[2].split()[:2] == ["users.u1", "prefs"]

    def keys(*args: str) -> list[str]:
        return [f"{'.'.join(i['namespace'])}/{i['key']}" for i in plait.json("store", "search", *args)["items"]]

    assert keys("users", "--filter", "name=Bob") == ["users.u2/prefs"]
    assert keys("--filter", "profile.city=Oslo") == ["users.u2/prefs"]
    assert keys("--filter", 'age:={"$gt": 30}') == ["users.u1/prefs"]
    assert keys("--filter-json", '{"age": {"$lte": 36}}') == []
    assert keys("--filter", "age=37") == []  # key=value is the string "37", not the number
    assert keys("--limit", "1", "--offset", "1") == ["notes/n1"]  # newest first: u1 was replaced last
    code, out, err = plait("store", "search", "--limit", "2")
    assert out.splitlines()[0] == "2 items (newest first)" and "more with --offset 2" in err

    assert plait("store", "rm", "notes", "n1", stdin="y\n")[0] == EXIT_OK
    code, _, err = plait("store", "rm", "users.u1", "prefs", stdin="n\n")
    assert code == EXIT_FAILED and "declined" in err
    removed = plait.json("store", "rm", "users.u2", "prefs", "--yes")
    assert removed == {"store": "t.db", "namespace": ["users", "u2"], "key": "prefs", "deleted": True}
    assert plait.json("store", "ls")["namespaces"] == [["users", "u1"]]


def test_a_value_comes_from_json_a_file_or_stdin_and_fields_add_to_it(plait: Plait, tmp_path: pathlib.Path) -> None:
    (tmp_path / "v.json").write_text('{"from": "file", "n": 1}')
    assert plait.json("store", "put", "a", "k", "--value", "@v.json", "n:=2")["item"]["value"] == {
        "from": "file",
        "n": 2,
    }
    piped = plait.json("store", "put", "a", "k", "--value", "-", "extra=yes", stdin='{"from": "stdin"}')
    assert piped["item"]["value"] == {"from": "stdin", "extra": "yes"} and piped["created"] is False
    assert plait.json("store", "put", "a", "empty", "--value", "{}")["item"]["value"] == {}
    assert plait.json("store", "get", '["a"]', "k")["value"] == {"from": "stdin", "extra": "yes"}


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("store", "get", "users.u1", "nope"), EXIT_USAGE, "list its items with: plait store ls users.u1 --items"),
        (("store", "rm", "users.u1", "nope", "--yes"), EXIT_USAGE, "no item 'nope' in namespace users.u1"),
        (("store", "get", "users..u1", "k"), EXIT_USAGE, "has an empty label"),
        (("store", "get", "", "k"), EXIT_USAGE, "a namespace such as users.u1"),
        (("store", "get", '["users", 1]', "k"), EXIT_USAGE, "a list of labels"),
        (("store", "get", '["a\\u0000b"]', "k"), EXIT_USAGE, "InvalidNamespaceError"),
        (("store", "put", "a", "k"), EXIT_USAGE, "give the item's value"),
        (("store", "put", "a", "k", "n:=nope"), EXIT_USAGE, "FIELD n:= takes JSON"),
        (("store", "put", "a", "k", "--value", "[1]"), EXIT_USAGE, "--value is a JSON object"),
        (("store", "put", "a", "k", "x=1", "--ttl", "0"), EXIT_USAGE, "--ttl is a positive number"),
        (("store", "search", "--query", "hi"), EXIT_USAGE, "add --index MODULE:ATTR"),
        (("store", "search", "--filter", 'a:={"$near": 1}'), EXIT_USAGE, "MemoryFilterError"),
        (("store", "search", "--filter-json", "[]"), EXIT_USAGE, "--filter-json is a JSON object"),
        (("store", "search", "--offset", "-1"), EXIT_USAGE, "--offset is how many to skip"),
        (("store", "ls", "--items", "--max-depth", "1"), EXIT_USAGE, "--max-depth and --suffix list namespaces"),
        (("store", "put", "a", "k", "x=1", "--index", "app.py:not_an_index"), EXIT_USAGE, "is a int"),
        (("store", "put", "a", "k", "x=1", "--index", "app.py:nothing"), EXIT_USAGE, "no attribute 'nothing'"),
    ],
)
def test_errors_say_what_to_do(plait: Plait, args: tuple[str, ...], code: int, words: str) -> None:
    assert plait("store", "put", "users.u1", "prefs", "name=Ada")[0] == EXIT_OK
    got, out, err = plait(*args)
    assert got == code and out == ""
    assert err.strip().splitlines()[-1].startswith("error: ") and words in err, err
    assert "Traceback" not in err


def test_a_store_that_keeps_no_memory_is_named(plait: Plait, tmp_path: pathlib.Path) -> None:
    (tmp_path / "files").mkdir()
    plait.capsys.readouterr()
    assert main(["store", "ls", "--db", f"file://{tmp_path / 'files'}"]) == EXIT_USAGE
    err = plait.capsys.readouterr().err
    assert "keeps no memory (plait.Store)" in err and "--db plait.db" in err
    assert main(["store", "ls", "--db", "missing.db"]) == EXIT_USAGE  # reads never create a database
    assert not (tmp_path / "missing.db").exists()


def test_query_search_ranks_with_the_applications_index(plait: Plait) -> None:
    for key, text in (("a", "aaaa"), ("b", "bbbb"), ("c", "cccc")):
        assert plait("store", "put", "docs", key, f"text={text}", "--index", "app.py:index")[0] == EXIT_OK
    assert plait("store", "put", "docs", "plain", "text=bbbb")[0] == EXIT_OK  # not embedded: no vector
    found = plait.json("store", "search", "docs", "--query", "bb", "--index", "app.py:index")
    assert [i["key"] for i in found["items"]][0] == "b" and {i["key"] for i in found["items"]} == {"a", "b", "c"}
    scores = [i["score"] for i in found["items"]]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0.99
    code, out, _ = plait("store", "search", "docs", "--query", "cc", "--index", "app.py:store", "--limit", "1")
    assert out.splitlines()[1].split()[:3] == ["namespace", "key", "score"]
    assert out.splitlines()[2].split()[:2] == ["docs", "c"]
    # the application's Store brings its ttl too: a put through it expires after its default
    assert plait.json("store", "put", "docs", "d", "text=dd", "--index", "app.py:store")["ttl"] == 30
    assert plait.json("store", "put", "docs", "e", "text=ee", "--index", "app.py:store", "--ttl", "5")["ttl"] == 5


def test_db_sweep_deletes_the_expired_items(plait: Plait, tmp_path: pathlib.Path) -> None:
    assert plait("store", "put", "a", "kept", "x=1")[0] == EXIT_OK
    hour_ago = time.time() - 3600
    checkpointer = SqliteCheckpointer(str(tmp_path / "t.db"))
    try:
        past = Store(checkpointer, clock=lambda: hour_ago)
        past.put(("a",), "gone", {"x": 2}, ttl=1)
        past.put(("b",), "gone", {"x": 3}, ttl=1)
        assert plait.json("store", "ls", "--items")["items"][0]["key"] == "kept"  # expired: hidden already
        swept = plait.json("db", "sweep")
        assert (swept["store"], swept["swept"], swept["retention"]["deleted"]) == ("t.db", 2, [])
        # the rows are gone, not just hidden: the clock they were written by sees them no more
        assert [i.key for i in past.search((), refresh_ttl=False)] == ["kept"]
        code, out, _ = plait("db", "sweep")
        assert out.strip() == "swept 0 expired memory items from t.db"
        assert [i.key for i in checkpointer.store.search(())] == ["kept"]
    finally:
        checkpointer.close()


def test_every_store_output_holds_to_its_schema(plait: Plait, validate: Validate) -> None:
    put = plait.json("store", "put", "users.u1", "prefs", "name=Ada", "--ttl", "60")
    validate("store-put", put)
    assert put["created"] is True and put["ttl"] == 60
    validate("store-put", plait.json("store", "put", "users.u1", "prefs", "name=Ada"))
    validate("store-put", plait.json("store", "put", "docs", "a", "text=aa", "--index", "app.py:index"))
    validate("store-get", plait.json("store", "get", "users.u1", "prefs"))
    validate("store-ls", plait.json("store", "ls"))
    validate("store-ls", plait.json("store", "ls", "users", "--items"))
    validate("store-search", plait.json("store", "search", "--filter", "name=Ada"))
    validate("store-search", plait.json("store", "search", "--query", "a", "--index", "app.py:index"))
    validate("store-rm", plait.json("store", "rm", "users.u1", "prefs", "--yes"))
    validate("db-sweep", plait.json("db", "sweep"))
    validate("error", plait.json("store", "get", "users.u1", "prefs", code=EXIT_USAGE))


def test_the_console_script_reads_a_piped_value(cli: Cli) -> None:
    """End to end through the installed ``plait``: stdin piped into ``put --value -``."""
    res = cli("store", "put", "users.u1", "prefs", "--value", "-", "--db", "t.db", stdin='{"name": "Ada"}')
    assert res.code == EXIT_OK, res.err
    res = cli("store", "get", "users.u1", "prefs", "--db", "t.db", "--json")
    assert res.json()["value"] == {"name": "Ada"}


def test_the_worker_refuses_a_memory_sweep_that_is_not_positive(plait: Plait) -> None:
    """``plait worker --memory-sweep 0`` is refused before anything connects."""
    pytest.importorskip("procrastinate")
    plait.capsys.readouterr()
    argv = ["worker", "--db", "postgresql://nobody@127.0.0.1:1/none", "--graph", "app.py:index", "--memory-sweep", "0"]
    assert main(argv) == EXIT_USAGE
    assert "--memory-sweep must be a positive number of minutes, got 0" in plait.capsys.readouterr().err


def test_the_commands_work_on_postgresql(
    plait: Plait, postgres_dsn: str, postgres_schema: str, validate: Validate
) -> None:
    db = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}options=-csearch_path%3D{postgres_schema}"

    def run(*args: str, code: int = EXIT_OK) -> Any:
        plait.capsys.readouterr()
        assert main([*args, "--db", db, "--json"]) == code
        return json.loads(plait.capsys.readouterr().out or "null")

    validate("store-put", run("store", "put", "users.u1", "prefs", "name=Ada", "age:=36", "--ttl", "5"))
    run("store", "put", "users.u2", "prefs", "name=Bob", "age:=20")
    assert run("store", "ls")["namespaces"] == [["users", "u1"], ["users", "u2"]]
    found = run("store", "search", "users", "--filter", 'age:={"$gt": 30}')
    assert [i["namespace"] for i in found["items"]] == [["users", "u1"]]
    assert run("store", "get", "users.u2", "prefs")["value"] == {"name": "Bob", "age": 20}
    assert run("store", "rm", "users.u2", "prefs", "--yes")["deleted"] is True
    run("store", "get", "users.u2", "prefs", code=EXIT_USAGE)
    assert run("db", "sweep")["swept"] == 0


def test_a_terminal_table_shows_a_values_brackets_as_they_are() -> None:
    """rich reads ``[bold]`` in a cell as markup; a memory's value is data, shown whole."""
    pytest.importorskip("rich")
    from plait.cli.output import Out

    stream = io.StringIO()
    Out(rich=True, stream=stream).table("items [all]", ["value"], [['{"text": "see [bold]this[/bold] [x]"}']])
    shown = stream.getvalue()
    assert "items [all]" in shown and "see [bold]this[/bold] [x]" in shown
