"""plait export / plait import: a thread moved between stores (SQLite, PostgreSQL, the file
store) with byte-identical state: every checkpoint, its metadata and its pending writes."""

from __future__ import annotations

import json

import pytest

from plait.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

FANOUT = """
    from plait import END, START, AppendList, Graph, StateSchema

    schema = StateSchema.builder().add("notes", AppendList()).add_lww("fail", default=True).build()

    def ok(state):
        return {"notes": ["ok ran"]}

    def flaky(state):
        if state["fail"]:
            raise RuntimeError("flaky")
        return {"notes": ["flaky ran"]}

    graph = Graph(schema)
    graph.add_node("ok", ok).add_node("flaky", flaky)
    graph.add_edge(START, "ok").add_edge(START, "flaky").add_edge("ok", END).add_edge("flaky", END)
"""


def threads_with_pending_writes(cli: Cli, db: str) -> None:
    """``w`` waits for an interrupt; ``f`` failed with its sibling's result saved; ``d`` is done."""
    cli.write("fanout.py", FANOUT)
    assert cli("run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "w", "--db", db).code == EXIT_INTERRUPTED
    assert cli("run", "fanout.py:graph", "-t", "f", "--db", db).code == EXIT_FAILED
    assert cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "d", "--db", db).code == EXIT_OK


def export(cli: Cli, thread: str, db: str) -> str:
    res = cli("export", thread, "--db", db)
    assert res.code == EXIT_OK, res.err
    return res.out


@pytest.mark.postgres
def test_sqlite_to_postgres_and_back_is_byte_identical(cli: Cli, postgres_dsn: str, postgres_schema: str) -> None:
    pg = f"{postgres_dsn}?options=-csearch_path%3D{postgres_schema}"
    threads_with_pending_writes(cli, "a.db")
    for thread in ("w", "f", "d"):
        original = export(cli, thread, "a.db")
        (cli.folder / f"{thread}.jsonl").write_text(original)
        res = cli("import", f"{thread}.jsonl", "--db", pg, "--json")
        assert res.code == EXIT_OK, res.err
        assert export(cli, thread, pg) == original
        back = cli("import", "-", "--db", "b.db", stdin=export(cli, thread, pg))
        assert back.code == EXIT_OK, back.err
        assert export(cli, thread, "b.db") == original
    lines = [json.loads(line) for line in (cli.folder / "f.jsonl").read_text().splitlines()]
    assert any(w[1] == "result" for line in lines[1:] for w in line["pending_writes"])
    # the moved threads go on where they stopped, in the new store
    res = cli("resume", "flow.py:with_question", "w", "--resume", '"yes"', "--db", pg, "--json")
    assert res.code == EXIT_OK and res.json()["values"]["answer"] == "yes"
    res = cli("update", "f", "--graph", "fanout.py:graph", "--set", "fail:=false", "--db", pg)
    assert res.code == EXIT_OK, res.err
    res = cli("resume", "fanout.py:graph", "f", "--db", pg, "--json")
    assert res.json()["values"]["notes"] == ["ok ran", "flaky ran"]  # ok was not run again


def test_sqlite_to_the_file_store_is_byte_identical(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    store = f"file://{cli.folder}/files"
    for thread in ("w", "f", "d"):
        original = export(cli, thread, "a.db")
        assert cli("import", "-", "--db", store, stdin=original).code == EXIT_OK
        assert export(cli, thread, store) == original


def test_the_format_is_versioned_and_documented_line_by_line(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    lines = [json.loads(line) for line in export(cli, "w", "a.db").splitlines()]
    history = cli("history", "w", "--db", "a.db", "--json").json()
    assert lines[0] == {"format": "plait-thread", "version": 1, "thread_id": "w", "namespace": "", "checkpoints": 2}
    assert [line["checkpoint_id"] for line in lines[1:]] == [h["checkpoint_id"] for h in reversed(history)]
    assert lines[-1]["pending_writes"][0][1] == "interrupt"


def test_import_refuses_an_existing_thread_unless_replace(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    (cli.folder / "d.jsonl").write_text(export(cli, "d", "a.db"))
    res = cli("import", "d.jsonl", "--db", "a.db")
    assert res.code == EXIT_USAGE
    assert "thread 'd' already exists" in res.one_line() and "--replace" in res.one_line()
    cli("update", "d", "--graph", "flow.py:graph", "--set", "topic=changed", "--db", "a.db")
    res = cli("import", "d.jsonl", "--db", "a.db", "--replace", "--json")
    assert res.code == EXIT_OK and res.json()["replaced"] is True
    assert export(cli, "d", "a.db") == (cli.folder / "d.jsonl").read_text()


def test_import_under_another_id_and_namespace(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    (cli.folder / "d.jsonl").write_text(export(cli, "d", "a.db"))
    res = cli("import", "d.jsonl", "--thread", "copy", "--namespace", "team", "--db", "a.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["thread_id"] == "copy" and res.json()["namespace"] == "team"
    state = cli("state", "copy", "--namespace", "team", "--db", "a.db", "--json").json()
    assert state["values"] == cli("state", "d", "--db", "a.db", "--json").json()["values"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "the file is empty"),
        ("not json\n", "line 1: not JSON"),
        (
            '{"format": "plait-thread", "version": 9, "thread_id": "t", "namespace": "", "checkpoints": 0}\n',
            "version 9",
        ),
        ('{"format": "other"}\n', "no plait-thread header"),
        ('{"format": "plait-thread", "version": 1, "thread_id": "t", "namespace": "", "checkpoints": 2}\n', "says 2"),
    ],
)
def test_a_file_that_is_not_an_export_is_refused_and_nothing_is_written(cli: Cli, text: str, needle: str) -> None:
    (cli.folder / "x.jsonl").write_text(text)
    res = cli("import", "x.jsonl", "--db", "a.db")
    assert res.code == EXIT_USAGE
    line = res.one_line()
    assert needle in line and "x.jsonl" in line
    assert not (cli.folder / "a.db").exists()


def test_a_damaged_checkpoint_line_is_refused_whole(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    lines = export(cli, "d", "a.db").splitlines()
    record = json.loads(lines[2])
    del record["values"]
    lines[2] = json.dumps(record)
    (cli.folder / "bad.jsonl").write_text("\n".join(lines) + "\n")
    res = cli("import", "bad.jsonl", "--thread", "n", "--db", "a.db")
    assert res.code == EXIT_USAGE and "line 3: a checkpoint without values" in res.one_line()
    assert cli("state", "n", "--db", "a.db").code == EXIT_USAGE  # nothing of it landed


def test_export_to_a_file(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    res = cli("export", "d", "-o", "d.jsonl", "--db", "a.db")
    assert res.code == EXIT_OK and "exported d: 3 checkpoints to d.jsonl" in res.out
    assert (cli.folder / "d.jsonl").read_text() == export(cli, "d", "a.db")


def test_delete_asks_first(cli: Cli) -> None:
    threads_with_pending_writes(cli, "a.db")
    res = cli("delete", "d", "--db", "a.db", stdin="n\n")
    assert res.code == EXIT_FAILED and "declined" in res.one_line()
    assert "delete thread 'd' and its 3 checkpoints from a.db? [y/N]" in res.err
    res = cli("delete", "d", "--db", "a.db")  # no answer on stdin
    assert res.code == EXIT_USAGE and "--yes" in res.one_line()
    assert cli("state", "d", "--db", "a.db").code == EXIT_OK  # still there
    res = cli("delete", "d", "--db", "a.db", stdin="y\n")
    assert res.code == EXIT_OK and "deleted d: 3 checkpoints" in res.out
    assert cli("state", "d", "--db", "a.db").code == EXIT_USAGE
    res = cli("delete", "w", "--yes", "--db", "a.db", "--json")
    assert res.json() == {"thread_id": "w", "namespace": "", "deleted": True, "checkpoints": 2}
    assert [t["thread_id"] for t in cli("threads", "--db", "a.db", "--json").json()] == ["f"]


def test_export_says_what_a_side_branch_leaves_out(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "a.db")
    assert cli("resume", "flow.py:graph", "t", "--step", "0", "--db", "a.db").code == EXIT_OK  # time travel
    res = cli("export", "t", "--db", "a.db")
    assert res.code == EXIT_OK
    assert "thread 't' has 2 checkpoints off its head's lineage" in res.err and "not exported" in res.err
    header = json.loads(res.out.splitlines()[0])
    assert header["checkpoints"] == 4 == len(res.out.splitlines()) - 1
