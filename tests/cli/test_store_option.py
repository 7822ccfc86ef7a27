"""--db (and $PLAIT_DB): every form of store address, one line and exit 2 for anything that is
no store, and a DSN's password never printed."""

from __future__ import annotations

import os
import pathlib

import pytest

from plait.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

FORMS = "A --db is a SQLite file (plait.db, sqlite:///relative/path.db"


def run(cli: Cli, db: str, thread: str = "t") -> None:
    res = cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", thread, "--db", db)
    assert res.code == EXIT_OK, res.err


@pytest.mark.parametrize(
    ("setup", "db", "needle"),
    [
        ("dir", "folder.db", "it is a directory, not a SQLite file"),
        ("text", "notes.db", "the file exists but is not a SQLite database"),
        ("", "no/such/folder/x.db", "no database at 'no/such/folder/x.db'"),
        ("", "mysql://u@h/db", "plait has no store for the scheme 'mysql:'"),
        ("", "sqlite://x.db", "three slashes"),
        ("", "host=h dbname=d", "key=value"),
        ("", "missing.db", "no database at 'missing.db'"),
    ],
)
def test_a_db_that_is_no_store_is_one_line_and_exit_2(cli: Cli, setup: str, db: str, needle: str) -> None:
    if setup == "dir":
        (cli.folder / db).mkdir()
    elif setup == "text":
        (cli.folder / db).write_text("id,name\n1,x\n")
    for args in (("threads",), ("history", "t"), ("state", "t"), ("db", "stats"), ("export", "t")):
        res = cli(*args, "--db", db)
        assert res.code == EXIT_USAGE, (args, res.err)
        line = res.one_line()
        assert needle in line and FORMS in line, line
    if setup == "text":
        assert (cli.folder / db).read_text() == "id,name\n1,x\n"  # never opened as a database
    assert not (cli.folder / "missing.db").exists()


def test_run_refuses_a_db_that_is_no_store_before_running(cli: Cli) -> None:
    (cli.folder / "notes.db").write_text("x")
    res = cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "--db", "notes.db")
    assert res.code == EXIT_USAGE and "not a SQLite database" in res.one_line()
    assert "thread" not in res.out  # nothing ran
    res = cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "--db", "no/such/folder/x.db")
    assert res.code == EXIT_USAGE and "its folder" in res.one_line() and "does not exist" in res.one_line()


def test_sqlite_urls_name_files(cli: Cli) -> None:
    run(cli, "sqlite:///rel.db")
    assert (cli.folder / "rel.db").exists()
    absolute = cli.folder / "abs.db"
    run(cli, f"sqlite:///{absolute}")
    assert absolute.exists()
    threads = cli("threads", "--db", "rel.db", "--json").json()  # the same file by its path
    assert [t["thread_id"] for t in threads] == ["t"]


def test_file_and_memory_stores(cli: Cli) -> None:
    run(cli, f"file://{cli.folder}/threads")
    assert list((cli.folder / "threads").glob("*.jsonl"))
    assert cli("threads", "--db", f"file://{cli.folder}/threads", "--json").json()[0]["thread_id"] == "t"
    assert cli("threads", "--db", "memory:", "--json").json() == []


def test_plait_db_is_the_default_for_db(cli: Cli) -> None:
    env = {"PLAIT_DB": "env.db"}
    assert cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", env=env).code == EXIT_OK
    assert (cli.folder / "env.db").exists() and not (cli.folder / "plait.db").exists()
    assert [t["thread_id"] for t in cli("threads", "--json", env=env).json()] == ["t"]
    assert cli("threads", "--db", "other.db", env=env).code == EXIT_USAGE  # --db wins over it
    res = cli("threads", env={"PLAIT_DB": "nosuch.db"})
    assert res.code == EXIT_USAGE and "nosuch.db" in res.one_line()


def test_without_db_or_plait_db_the_store_is_plait_db(cli: Cli) -> None:
    assert cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t").code == EXIT_OK
    assert (cli.folder / "plait.db").exists()


def test_the_demo_says_to_set_plait_db_and_its_store_is_found_with_it(cli: Cli) -> None:
    res = cli("demo")
    assert res.code == EXIT_OK, res.err
    assert "export PLAIT_DB=plait-demo.db" in res.out
    threads = cli("threads", "--json", env={"PLAIT_DB": "plait-demo.db"}).json()
    assert len(threads) == 2


@pytest.mark.postgres
def test_a_dsn_password_is_never_printed(cli: Cli, postgres_dsn: str, postgres_schema: str) -> None:
    # trust authentication ignores the password, so a DSN with one still connects
    user_host = postgres_dsn.split("://", 1)[1]
    user, _, host = user_host.partition("@")
    dsn = f"postgresql://{user}:s3cr%21t@{host}?options=-csearch_path%3D{postgres_schema}"
    for args in (("db", "migrate"), ("db", "stats"), ("threads",)):
        for extra in ((), ("--json",)):
            res = cli(*args, "--db", dsn, *extra)
            assert res.code == EXIT_OK, res.err
            assert "s3cr" not in res.out + res.err
    assert "***" in cli("db", "stats", "--db", dsn).out
    bad = dsn.replace(host.split("/")[0], "127.0.0.1:1")
    res = cli("threads", "--db", bad, "--json")
    assert res.code == EXIT_FAILED
    assert "s3cr" not in res.out + res.err
    assert res.error()["error"] == "CheckpointError"
    res = cli("history", "t", "--db", "mysql://me:s3cr%21t@h/db")
    assert res.code == EXIT_USAGE and "s3cr" not in res.err and "me:***@h" in res.one_line()


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens any file")
def test_an_unreadable_db_is_refused(cli: Cli) -> None:
    run(cli, "t.db")
    path = pathlib.Path(cli.folder / "t.db")
    path.chmod(0)
    try:
        res = cli("threads", "--db", "t.db")
        assert res.code == EXIT_USAGE and "cannot be read" in res.one_line()
    finally:
        path.chmod(0o600)
