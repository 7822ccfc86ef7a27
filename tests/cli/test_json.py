"""One JSON shape: every --json output holds to its schema in docs/cli-schemas/, times are ISO
8601 UTC, a head is always checkpoint_id, errors are one JSON object on stderr, and nothing a
node prints reaches stdout."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from plait.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

Validate = Callable[[str, Any], None]

CHAT = """
    from plait import END, START, AppendMessages, Graph, StateSchema

    schema = StateSchema.builder().add("messages", AppendMessages()).add_lww("n", default=0).build()

    def talk(state):
        n = state["n"] + 1
        return {"messages": [{"id": f"m{n}", "role": "user", "content": "x" * 500}], "n": n}

    graph = Graph(schema)
    graph.add_node("talk", talk).add_edge(START, "talk")
    graph.add_conditional_edges("talk", lambda s: END if s["n"] >= 40 else "talk", {"talk": "talk", END: END})
"""


def keys_of(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            if k not in ("values", "metadata", "value"):
                yield from keys_of(v)
    elif isinstance(value, list):
        for v in value:
            yield from keys_of(v)


def test_every_output_holds_to_its_schema(cli: Cli, validate: Validate) -> None:
    def ok(name: str, *args: str, code: int = EXIT_OK) -> Any:
        res = cli(*args, "--json", env={"PLAIT_DB": "t.db"})
        assert res.code == code, (args, res.err)
        data = res.json()
        validate(name, data)
        assert not {"head_id", "head_a", "head_b", "total"} & set(keys_of(data)), data
        return data

    done = ok("run", "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a")
    assert done["status"] == "done" and done["ran"] is True
    waiting = ok("run", "run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "w", code=EXIT_INTERRUPTED)
    assert waiting["status"] == "interrupted" and waiting["interrupts"][0]["value"] == {"question": "publish q?"}
    paused = ok("run", "run", "flow.py:paused", "-i", '{"topic": "p"}', "-t", "p", code=EXIT_INTERRUPTED)
    assert paused["status"] == "paused" and paused["next"] == ["check"]
    ok("run", "resume", "flow.py:with_question", "w", "--resume", '"yes"')
    ok("run", "resume", "flow.py:graph", "a")
    threads = ok("threads", "threads")
    history = ok("history", "history", "a")
    assert threads[-1]["checkpoint_id"] == history[0]["checkpoint_id"]  # one name for a head
    ok("history", "history", "a", "--values")
    ok("history", "history", "a", "--keys", "log")
    ok("state", "state", "a")
    ok("state", "state", "a", "--step", "1")
    ok("update", "update", "a", "--graph", "flow.py:graph", "--set", "topic=z")
    ok("fork", "fork", "a", "--to", "b", "--step", "0")
    ok("fork", "fork", "a", "--to", "c", "--graph", "flow.py:graph", "--set", "topic=c")
    diff = ok("diff", "diff", "a", "c")
    assert diff["a"]["checkpoint_id"] == cli("state", "a", "--db", "t.db", "--json").json()["checkpoint_id"]
    ok("export", "export", "a", "-o", "a.jsonl")
    ok("import", "import", "a.jsonl", "--thread", "a2")
    ok("delete", "delete", "a2", "--yes")
    ok("db-migrate", "db", "migrate")
    ok("db-stats", "db", "stats")
    ok("db-prune", "db", "prune", "--keep-last", "1", "--dry-run")
    pruned = ok("db-prune", "db", "prune", "--keep-last", "1", "--yes")
    assert pruned["dropped"] > 0 and pruned["bytes_freed"] is not None
    ok("db-vacuum", "db", "vacuum")
    ok("draw", "draw", "flow.py:graph")
    ok("draw", "draw", "flow.py:graph", "-o", "g.mmd")


def test_the_export_lines_hold_to_their_schemas(cli: Cli, validate: Validate) -> None:
    cli("run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "w", "--db", "t.db")
    res = cli("export", "w", "--db", "t.db")
    lines = [json.loads(line) for line in res.out.splitlines()]
    validate("export-header", lines[0])
    for line in lines[1:]:
        validate("export-checkpoint", line)
    assert any(line["pending_writes"] for line in lines[1:])


def test_the_demo_summary_holds_to_its_schema(cli: Cli, validate: Validate) -> None:
    res = cli("demo", "--json")
    assert res.code == EXIT_OK, res.err
    validate("demo", res.json())


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("state", "nope"), EXIT_USAGE, "CheckpointNotFoundError"),
        (("run", "nofile.py:graph"), EXIT_USAGE, "TargetLoadError"),
        (("history", "t", "--limit", "0"), EXIT_USAGE, "ArgumentError"),
        (("threads", "--nosuch"), EXIT_USAGE, "ArgumentError"),
        (("threads", "--db", "mysql://h/db"), EXIT_USAGE, "StoreAddressError"),
        (("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "tb"), EXIT_FAILED, "NodeError"),
    ],
)
def test_with_json_an_error_is_one_json_object_on_stderr(
    cli: Cli, validate: Validate, args: tuple[str, ...], code: int, error: str
) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    res = cli(*args, "--json", env={"PLAIT_DB": "t.db"})
    assert res.code == code
    assert res.out == ""
    err = res.error()
    validate("error", err)
    assert err["error"] == error and err["exit_code"] == code and err["message"]
    if error == "NodeError":
        assert (err["thread_id"], err["node"], err["step"]) == ("tb", "check", 1)


def test_a_node_print_never_reaches_json_stdout(cli: Cli) -> None:
    res = cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db", "--json")
    assert res.code == EXIT_OK
    assert json.loads(res.out)["status"] == "done"  # stdout is one JSON document
    assert "check printed this" in res.err
    cli.write("noisy.py", "import os\nos.system('echo from a subprocess')\n" + (cli.folder / "flow.py").read_text())
    res = cli("run", "noisy.py:graph", "-i", '{"topic": "x"}', "-t", "u", "--db", "t.db", "--json")
    assert json.loads(res.out)["thread_id"] == "u"
    assert "from a subprocess" in res.err
    plain = cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "v", "--db", "t.db")
    assert "check printed this" in plain.out  # without --json, a node's output is the operator's to see


def test_history_json_is_metadata_only_unless_values_are_asked_for(cli: Cli) -> None:
    cli.write("chat.py", CHAT)
    assert cli("run", "chat.py:graph", "-t", "c", "--db", "t.db", "--json").code == EXIT_OK
    slim = cli("history", "c", "--db", "t.db", "--json")
    full = cli("history", "c", "--db", "t.db", "--json", "--values")
    some = cli("history", "c", "--db", "t.db", "--json", "--keys", "n")
    assert all("values" not in h for h in slim.json())
    assert all("messages" in h["values"] for h in full.json())
    assert all(set(h["values"]) <= {"n"} for h in some.json())
    assert len(full.json()) == len(slim.json()) == 41
    assert len(slim.out) * 10 < len(full.out)
    res = cli("history", "c", "--db", "t.db", "--json", "--values", "--keys", "n")
    assert res.code == EXIT_USAGE and "not both" in res.err


def test_times_are_iso_utc_everywhere(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    for args in (("threads",), ("history", "t"), ("state", "t")):
        data = cli(*args, "--db", "t.db", "--json").json()
        for item in data if isinstance(data, list) else [data]:
            assert item["created_at"].endswith("+00:00") and "T" in item["created_at"]


def test_every_schema_is_named_in_the_docs() -> None:
    """A schema added for a command is listed in docs/cli.md too (time.json is a part of the others)."""
    from ._cli_support import SCHEMAS

    text = (SCHEMAS.parent / "cli.md").read_text()
    unnamed = [
        p.name for p in SCHEMAS.glob("*.json") if p.name != "time.json" and not re.search(rf"[`/]{p.name}`", text)
    ]
    assert not unnamed, f"docs/cli.md names no {unnamed}"
