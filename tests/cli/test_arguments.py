"""Values on the command line: --set follows HTTPie (key=value is a string, key:=json is JSON,
malformed JSON is an error), --input is a JSON object, counts are at least 1, checkpoint ids
are accepted shortened (any unique prefix) or as --step."""

from __future__ import annotations

import os

import pytest

from plait.cli import EXIT_OK, EXIT_USAGE

from ._cli_support import Cli, Result


def ran(cli: Cli, thread: str = "t", topic: str = "x") -> None:
    assert cli("run", "flow.py:graph", "-i", f'{{"topic": "{topic}"}}', "-t", thread, "--db", "t.db").code == EXIT_OK


def update(cli: Cli, *sets: str) -> Result:
    args = [a for s in sets for a in ("--set", s)]
    return cli("update", "t", "--graph", "flow.py:graph", *args, "--db", "t.db", "--json")


def test_set_key_equals_value_is_a_string_even_when_it_looks_like_json(cli: Cli) -> None:
    ran(cli)
    res = update(cli, "topic=42", "answer=[1, 2]")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["topic"] == "42"
    assert res.json()["values"]["answer"] == "[1, 2]"


def test_set_key_colon_equals_json_is_json(cli: Cli) -> None:
    ran(cli)
    res = update(cli, "topic:=42", 'answer:={"ok": true, "n": [1]}', 'log:=["a", "b"]')
    assert res.code == EXIT_OK, res.err
    values = res.json()["values"]
    assert values["topic"] == 42 and values["answer"] == {"ok": True, "n": [1]}
    assert values["log"] == ["hello x", "checked", "a", "b"]  # folded through AppendList


def test_a_key_set_twice_is_written_twice(cli: Cli) -> None:
    ran(cli)
    res = update(cli, "log=one", "log=two")
    assert res.json()["values"]["log"][-2:] == ["one", "two"]


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("log:=[1,", "--set log:= takes JSON, and '[1,' is not"),
        ("topic:=yes", "for a string write topic=yes"),
        ("novalue", "--set takes key=value (a string) or key:=json"),
        ("=x", "--set takes key=value"),
        (":=1", "--set takes key=value"),
    ],
)
def test_malformed_sets_are_usage_errors_and_write_nothing(cli: Cli, item: str, needle: str) -> None:
    ran(cli)
    before = cli("history", "t", "--db", "t.db", "--json").json()
    res = cli("update", "t", "--graph", "flow.py:graph", "--set", item, "--db", "t.db")
    assert res.code == EXIT_USAGE
    assert needle in res.one_line()
    assert cli("history", "t", "--db", "t.db", "--json").json() == before


def test_fork_set_follows_the_same_convention(cli: Cli) -> None:
    ran(cli)
    res = cli("fork", "t", "--to", "f", "--step", "0", "-g", "flow.py:graph", "-s", "topic:=7", "--db", "t.db")
    assert res.code == EXIT_OK, res.err
    assert cli("state", "f", "--key", "topic", "--db", "t.db", "--json").json() == 7
    res = cli("fork", "t", "--to", "g", "-g", "flow.py:graph", "-s", "topic:={", "--db", "t.db")
    assert res.code == EXIT_USAGE and "takes JSON" in res.one_line()


@pytest.mark.parametrize(("text", "kind"), [("[1, 2]", "a list"), ('"x"', "a str"), ("null", "null"), ("3", "a int")])
def test_input_must_be_a_json_object(cli: Cli, text: str, kind: str) -> None:
    res = cli("run", "flow.py:graph", "-i", text, "--db", "t.db")
    assert res.code == EXIT_USAGE
    line = res.one_line()
    assert "--input is a JSON object of channel values" in line and kind in line
    assert "TypeError" not in res.err


def test_input_from_a_file_and_a_file_that_is_not_there(cli: Cli) -> None:
    cli.write("in.json", '{"topic": "file"}')
    res = cli("run", "flow.py:graph", "-i", "@in.json", "-t", "t", "--db", "t.db", "--json")
    assert res.json()["values"]["log"][0] == "hello file"
    res = cli("run", "flow.py:graph", "-i", "@nosuch.json", "--db", "t.db")
    assert res.code == EXIT_USAGE and "cannot read 'nosuch.json'" in res.one_line()


@pytest.mark.parametrize("limit", ["0", "-1", "-20"])
def test_history_limit_below_one_is_a_usage_error(cli: Cli, limit: str) -> None:
    ran(cli)
    res = cli("history", "t", "--limit", limit, "--db", "t.db")
    assert res.code == EXIT_USAGE
    assert f"--limit must be at least 1, got {limit}" in res.one_line()
    assert cli("threads", "--limit", limit, "--db", "t.db").code == EXIT_USAGE


def history_ids(cli: Cli, thread: str = "t") -> list[str]:
    return [h["checkpoint_id"] for h in cli("history", thread, "--db", "t.db", "--json").json()]


def test_the_shortened_ids_a_table_shows_are_accepted_back(cli: Cli) -> None:
    ran(cli)
    table = cli("history", "t", "--db", "t.db").out
    ids = history_ids(cli)
    shown = [line.split()[1] for line in table.splitlines()[2:]]
    assert len(shown) == 3 and all(full.startswith(short) and short != full for short, full in zip(shown, ids))
    for short, full in zip(shown, ids):
        state = cli("state", "t", "--checkpoint", short, "--db", "t.db", "--json").json()
        assert state["checkpoint_id"] == full


def test_any_unique_prefix_and_step_select_a_checkpoint_everywhere(cli: Cli) -> None:
    ran(cli)
    ids = history_ids(cli)  # newest first: steps 2, 1, 0
    prefix = next(ids[2][:n] for n in range(1, 23) if sum(i.startswith(ids[2][:n]) for i in ids) == 1)
    assert cli("state", "t", "-c", prefix, "--db", "t.db", "--json").json()["step"] == 0
    assert cli("state", "t", "--step", "1", "--db", "t.db", "--json").json()["checkpoint_id"] == ids[1]
    res = cli("fork", "t", "--to", "f", "-c", prefix, "--db", "t.db", "--json")
    assert res.json()["forked_from"]["checkpoint_id"] == ids[2]
    res = cli("resume", "flow.py:graph", "t", "--step", "0", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["parent_id"] is not None and res.json()["ran"] is True  # replayed: a new branch from step 0


def test_an_ambiguous_prefix_lists_the_candidates(cli: Cli) -> None:
    ran(cli)
    ids = history_ids(cli)
    common = os.path.commonprefix(ids)  # all three start with it
    assert common
    res = cli("state", "t", "--checkpoint", common, "--db", "t.db")
    assert res.code == EXIT_USAGE
    line = res.one_line()
    assert "ambiguous" in line and all(i in line for i in ids) and "--step" in line
    err = cli("state", "t", "--checkpoint", common, "--db", "t.db", "--json").error()
    assert err["error"] == "AmbiguousCheckpointError" and {c["checkpoint_id"] for c in err["candidates"]} == set(ids)


def test_checkpoint_and_step_exclude_each_other_and_steps_are_not_negative(cli: Cli) -> None:
    ran(cli)
    res = cli("state", "t", "--checkpoint", "0", "--step", "1", "--db", "t.db")
    assert res.code == EXIT_USAGE and "not both" in res.one_line()
    res = cli("state", "t", "--step", "-1", "--db", "t.db")
    assert res.code == EXIT_USAGE and "--step is a step number" in res.one_line()
    res = cli("state", "t", "--step", "9", "--db", "t.db")
    assert res.code == EXIT_USAGE and "no checkpoint 'step 9'" in res.one_line()
