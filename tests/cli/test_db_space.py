"""``plait db stats`` shows where the space goes on every backend (per namespace, the largest
threads, subgraphs counted with their parent thread, dead space), and ``plait db vacuum``
gives it back."""

from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from plait import END, START, AppendList, Graph, StateSchema
from plait.checkpoint import open as open_store
from plait.cli import EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

Validate = Callable[[str, Any], None]


def _fill(address: str, **options: Any) -> None:
    """Namespace "" holds a (1 step) and big (a subgraph, 20 steps of 2 KB); "team" holds b."""
    schema = StateSchema.builder().add("log", AppendList()).build()
    inner = Graph(schema)
    inner.add_node("work", lambda s: {"log": ["w" * 2000]})
    inner.add_edge(START, "work").add_edge("work", END)
    outer = Graph(schema)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub").add_edge("sub", END)
    store = open_store(address, **options)
    try:
        app = outer.compile(checkpointer=store)
        for _ in range(20):
            app.invoke({"log": []}, thread_id="big")
        app.invoke({"log": ["x"]}, thread_id="a")
        outer.compile(checkpointer=store, namespace="team").invoke({"log": ["y"]}, thread_id="b")
    finally:
        store.close()


@pytest.fixture(params=["sqlite", "file", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, cli: Cli) -> str:
    """An address of each backend, filled by :func:`_fill`."""
    if request.param == "sqlite":
        address = str(cli.folder / "s.db")
        _fill(address)
    elif request.param == "file":
        address = (cli.folder / "files").as_uri()
        _fill(address)
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        schema = request.getfixturevalue("postgres_schema")
        _fill(dsn, schema=schema)
        address = f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
    return address


def test_db_stats_counts_subgraphs_with_their_thread_and_names_the_largest(
    cli: Cli, db: str, validate: Validate
) -> None:
    res = cli("db", "stats", "--db", db, "--json", "--top", "2")
    every = {t["thread_id"]: t for t in cli("db", "stats", "--db", db, "--json").json()["largest_threads"]}
    assert res.code == EXIT_OK, res.err
    stats = res.json()
    validate("db-stats", stats)
    assert stats["threads"] == 3  # a, big and b: the subgraph namespaces are not threads
    spaces = {n["namespace"]: n for n in stats["namespaces"]}
    assert set(spaces) == {"", "team"}
    assert spaces[""]["threads"] == 2 and spaces["team"]["threads"] == 1
    assert stats["checkpoints"] == sum(n["checkpoints"] for n in stats["namespaces"])
    largest = stats["largest_threads"]
    assert len(largest) == 2 and largest[0]["thread_id"] == "big" and set(every) == {"a", "b", "big"}
    big, a = every["big"], every["a"]
    assert big["checkpoints"] > 20 * 3, big  # its own 20 x 3 and its subgraphs' checkpoints
    assert big["bytes"] > 20 * 2000 and big["bytes"] > 5 * a["bytes"], every
    assert spaces[""]["bytes"] == big["bytes"] + a["bytes"] and spaces["team"]["bytes"] == every["b"]["bytes"]
    assert stats["dead"] is not None and stats["dead"]["bytes"] is not None
    text = cli("db", "stats", "--db", db)
    assert text.code == EXIT_OK and "largest threads (top 10):" in text.out and "big" in text.out
    assert "dead:" in text.out and "team" in text.out


def test_db_stats_refuses_a_top_below_one(cli: Cli) -> None:
    cli("db", "migrate", "--db", "s.db")
    res = cli("db", "stats", "--top", "0", "--db", "s.db")
    assert res.code == EXIT_USAGE and "--top must be at least 1" in res.err


def test_db_stats_shows_sqlite_dead_space_until_a_reclaim(cli: Cli, validate: Validate) -> None:
    _fill(str(cli.folder / "s.db"))
    assert cli("delete", "big", "--yes", "--db", "s.db").code == EXIT_OK
    dead = cli("db", "stats", "--db", "s.db", "--json").json()["dead"]
    assert dead["bytes"] > 20 * 2000 and dead["estimated"] is False, dead
    vacuumed = cli("db", "vacuum", "--db", "s.db", "--json")
    assert vacuumed.code == EXIT_OK, vacuumed.err
    record = vacuumed.json()
    validate("db-vacuum", record)
    assert record["bytes_freed"] > 20 * 2000 and record["bytes_after"] < record["bytes_before"], record
    assert cli("db", "stats", "--db", "s.db", "--json").json()["dead"]["bytes"] == 0


def test_db_vacuum_converts_an_older_sqlite_file_to_incremental_vacuum(cli: Cli) -> None:
    path = cli.folder / "old.db"
    _fill(str(path))
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:  # as plait made files before
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
    dead = cli("db", "stats", "--db", "old.db", "--json").json()["dead"]
    assert "plait db vacuum" in dead["reclaim"]
    res = cli("db", "vacuum", "--db", "old.db")
    assert res.code == EXIT_OK and res.out.startswith("vacuumed "), res.out
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)
    assert "incremental vacuum" in cli("db", "stats", "--db", "old.db", "--json").json()["dead"]["reclaim"]


@pytest.mark.postgres
def test_db_vacuum_on_postgres_vacuums_the_checkpoint_tables(
    cli: Cli, postgres_dsn: str, postgres_schema: str, validate: Validate
) -> None:
    _fill(postgres_dsn, schema=postgres_schema)
    db = f"{postgres_dsn}{'&' if '?' in postgres_dsn else '?'}options=-csearch_path%3D{postgres_schema}"
    res = cli("db", "vacuum", "--db", db, "--json")
    assert res.code == EXIT_OK, res.err
    record = res.json()
    validate("db-vacuum", record)
    assert record["bytes_before"] is None and record["bytes_freed"] >= 0


def test_db_stats_of_a_file_store_reads_its_file_sizes(cli: Cli) -> None:
    folder = cli.folder / "files"
    _fill(folder.as_uri())
    stats = cli("db", "stats", "--db", folder.as_uri(), "--json").json()
    files = sum(p.stat().st_size for p in pathlib.Path(folder).glob("*.jsonl"))
    assert sum(n["bytes"] for n in stats["namespaces"]) == files
