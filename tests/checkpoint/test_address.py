"""plait.checkpoint.open: every form of a store address, and every address it refuses."""

from __future__ import annotations

import os
import pathlib
import sqlite3

import pytest

from plait import END, START, Graph, StateSchema
from plait.checkpoint import (
    FileCheckpointer,
    MemoryCheckpointer,
    PostgresCheckpointer,
    SqliteCheckpointer,
    open,
    redact,
)
from plait.errors import STORE_ADDRESS_FORMS, StoreAddressError, StoreNotFoundError


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def sqlite_file(path: str) -> str:
    """Open ``path`` as a SQLite store, set it up, close it, and return the path it used."""
    store = open(path)
    assert isinstance(store, SqliteCheckpointer)
    try:
        store.setup()
    finally:
        store.close()
    return store.path


def test_a_bare_path_is_a_sqlite_file() -> None:
    assert sqlite_file("plain.db") == "plain.db"
    assert pathlib.Path("plain.db").read_bytes()[:16] == b"SQLite format 3\x00"


def test_a_path_object_is_a_sqlite_file(tmp_path: pathlib.Path) -> None:
    store = open(tmp_path / "p.db")
    assert isinstance(store, SqliteCheckpointer)
    store.close()
    assert store.path == str(tmp_path / "p.db")


def test_sqlite_url_with_three_slashes_is_relative() -> None:
    assert sqlite_file("sqlite:///rel.db") == "rel.db"
    assert pathlib.Path("rel.db").exists()


def test_sqlite_url_with_four_slashes_is_absolute(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "abs.db"
    assert sqlite_file(f"sqlite:///{target}") == str(target)  # /tmp/... after three slashes
    assert target.exists()


def test_sqlite_url_decodes_percent_escapes() -> None:
    assert sqlite_file("sqlite:///my%20runs.db") == "my runs.db"


def test_sqlite_memory_url_and_path() -> None:
    for address in ("sqlite:///:memory:", ":memory:"):
        store = open(address)
        assert isinstance(store, SqliteCheckpointer) and store.path == ":memory:"
        store.close()
    assert os.listdir(".") == []


def test_options_reach_the_constructor() -> None:
    store = open("opts.db", synchronous="normal", busy_timeout=2.0)
    assert isinstance(store, SqliteCheckpointer)
    assert (store.synchronous, store.busy_timeout) == ("normal", 2.0)
    store.close()


def test_an_existing_empty_file_is_a_new_database() -> None:
    pathlib.Path("empty.db").write_bytes(b"")
    assert sqlite_file("empty.db") == "empty.db"


@pytest.mark.parametrize("dsn", ["postgresql://u@127.0.0.1:1/db", "postgres://u@127.0.0.1:1/db"])
def test_postgres_dsns_open_a_postgres_checkpointer_without_connecting(dsn: str) -> None:
    store = open(dsn, connect_timeout=0.5)
    assert isinstance(store, PostgresCheckpointer)
    store.close()


@pytest.mark.postgres
def test_a_postgres_dsn_opens_a_working_store(postgres_dsn: str, postgres_schema: str) -> None:
    store = open(postgres_dsn, schema=postgres_schema)
    try:
        store.setup()
        assert store.list_threads() == []
    finally:
        store.close()


def test_file_url_opens_the_file_store(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "threads"
    for address in (f"file://{folder}", f"file://localhost{folder}"):
        store = open(address)
        assert isinstance(store, FileCheckpointer)
        assert store.folder == folder


def test_memory() -> None:
    assert isinstance(open("memory:"), MemoryCheckpointer)
    assert isinstance(open("memory://"), MemoryCheckpointer)


def refused(address: str, needle: str, **kw: object) -> StoreAddressError:
    with pytest.raises(StoreAddressError) as info:
        open(address, **kw)  # type: ignore[arg-type]
    message = str(info.value)
    assert needle in message, message
    assert STORE_ADDRESS_FORMS in message  # every refusal says what an address can be
    return info.value


@pytest.mark.parametrize("address", ["mysql://u@h/db", "redis:", "s3://bucket/key", "http://h/x.db"])
def test_an_unknown_scheme_is_refused(address: str) -> None:
    err = refused(address, "no store for the scheme")
    assert err.address == address
    assert not os.listdir(".")


def test_a_directory_is_not_a_sqlite_file() -> None:
    os.mkdir("folder.db")
    refused("folder.db", "is a directory")
    refused("sqlite:///folder.db", "is a directory")


def test_a_file_that_is_not_a_database_is_refused_by_its_header() -> None:
    pathlib.Path("notes.db").write_text('{"plait": "not a database"}\n')
    refused("notes.db", "not a SQLite database")
    assert pathlib.Path("notes.db").read_text() == '{"plait": "not a database"}\n'  # untouched


def test_a_file_too_short_for_a_header_is_refused() -> None:
    pathlib.Path("short.db").write_bytes(b"SQLite")
    refused("short.db", "not a SQLite database")


def test_a_real_database_passes_the_header_check() -> None:
    sqlite3.connect("made.db").execute("create table t (x)").connection.close()
    assert sqlite_file("made.db") == "made.db"


def test_a_path_in_a_missing_folder_is_refused() -> None:
    refused("no/such/folder/x.db", "does not exist")
    refused("file:///no/such/parent/threads", "does not exist")
    assert not os.path.exists("no")


def test_a_path_below_a_file_is_refused() -> None:
    pathlib.Path("plainfile").write_text("x")
    refused("plainfile/x.db", "does not exist")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes any file")
def test_an_unreadable_file_is_refused() -> None:
    sqlite3.connect("locked.db").execute("create table t (x)").connection.close()
    os.chmod("locked.db", 0)
    try:
        refused("locked.db", "cannot be read")
    finally:
        os.chmod("locked.db", 0o600)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_a_folder_that_is_not_writable_is_refused() -> None:
    os.mkdir("ro")
    os.chmod("ro", 0o500)
    try:
        refused("ro/x.db", "not writable")
    finally:
        os.chmod("ro", 0o700)


def test_create_false_refuses_what_does_not_exist_and_creates_nothing() -> None:
    with pytest.raises(StoreNotFoundError, match="no SQLite database exists there"):
        open("missing.db", create=False)
    with pytest.raises(StoreNotFoundError, match="no file-store folder exists there"):
        open(f"file://{os.getcwd()}/missing", create=False)
    assert not os.listdir(".")


def test_create_false_opens_what_exists() -> None:
    sqlite_file("here.db")
    store = open("here.db", create=False)
    store.close()


def test_a_file_where_the_file_store_wants_a_folder() -> None:
    pathlib.Path("afile").write_text("x")
    refused(f"file://{os.getcwd()}/afile", "is a file, not a folder")


@pytest.mark.parametrize(
    ("address", "needle"),
    [
        ("sqlite://host/x.db", "three slashes"),
        ("sqlite:x.db", "three slashes"),
        ("sqlite:///x.db?mode=ro", "no query"),
        ("sqlite:///", "names no file"),
        ("file://elsewhere/x", "not on 'elsewhere'"),
        ("file://", "names no folder"),
        ("file:///x?y", "no query"),
        ("memory:something", "nothing after the colon"),
        ("", "empty"),
        ("   ", "empty"),
        ("a\x00b.db", "NUL"),
        ("host=localhost dbname=test", "key=value"),
        ("dbname=test", "key=value"),
    ],
)
def test_malformed_addresses_are_refused(address: str, needle: str) -> None:
    refused(address, needle)


def test_a_store_address_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        open("mysql://h/db")


def test_a_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        open(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("address", "shown"),
    [
        ("postgresql://alice:s3cret@db.example:5432/app", "postgresql://alice:***@db.example:5432/app"),
        ("postgres://alice:s3cret@db/app?sslmode=require", "postgres://alice:***@db/app?sslmode=require"),
        ("postgresql://db/app?user=a&password=s3cret", "postgresql://db/app?user=a&password=***"),
        ("postgresql://alice@db/app", "postgresql://alice@db/app"),
        ("host=db password=s3cret user=a", "host=db password=*** user=a"),
        ("plait.db", "plait.db"),
    ],
)
def test_redact_hides_passwords(address: str, shown: str) -> None:
    assert redact(address) == shown


def test_errors_never_show_a_password() -> None:
    err = refused("mysql://alice:s3cret@db/app", "no store")
    assert "s3cret" not in str(err) and "s3cret" not in err.address
    err = refused("host=db password=s3cret", "key=value")
    assert "s3cret" not in str(err)


def graph() -> Graph:
    g = Graph(StateSchema.builder().add_lww("x").build())
    g.add_node("n", lambda s: {"x": 2}).add_edge(START, "n").add_edge("n", END)
    return g


@pytest.mark.parametrize("address", ["compiled.db", "sqlite:///compiled.db"])
def test_compile_takes_a_sqlite_path_or_url(address: str) -> None:
    app = graph().compile(checkpointer=address)
    assert app.invoke({"x": 1}, thread_id="t") == {"x": 2}
    assert isinstance(app.checkpointer, SqliteCheckpointer)
    app.checkpointer.close()
    assert pathlib.Path("compiled.db").exists()


def test_compile_takes_memory_and_file_addresses(tmp_path: pathlib.Path) -> None:
    for address in ("memory:", f"file://{tmp_path}/store"):
        app = graph().compile(checkpointer=address)
        assert app.invoke({"x": 1}, thread_id="t") == {"x": 2}
        assert app.get_state("t").values == {"x": 2}


def test_compile_refuses_an_address_it_cannot_open() -> None:
    with pytest.raises(StoreAddressError):
        graph().compile(checkpointer="mysql://h/db")
