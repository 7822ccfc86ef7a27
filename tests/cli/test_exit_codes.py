"""One table of exit codes for every command: 0 done, 1 the run failed (or the command could
not be done), 2 usage error or not found, 3 paused for input. The table in docs/cli.md says
the same, and a test reads it."""

from __future__ import annotations

import pathlib
import re
import shutil

import pytest

from plait.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

from ._cli_support import FLOW, Cli

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A folder with flow.py and t.db holding threads done, failed and waiting."""
    folder = tmp_path_factory.mktemp("store")
    cli = Cli(folder)
    cli.write("flow.py", FLOW)
    assert cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "done", "--db", "t.db").code == EXIT_OK
    assert cli("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "failed", "--db", "t.db").code == EXIT_FAILED
    waiting = cli("run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "waiting", "--db", "t.db")
    assert waiting.code == EXIT_INTERRUPTED
    cli("export", "done", "-o", "done.jsonl", "--db", "t.db")
    (folder / "notes.txt").write_text("not an export\n")
    return folder


CASES: list[tuple[str, int, tuple[str, ...], str]] = [
    # (name, expected code, arguments, stdin)
    ("run done", EXIT_OK, ("run", "flow.py:graph", "-i", '{"topic": "y"}', "-t", "new"), ""),
    ("run failed", EXIT_FAILED, ("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "new"), ""),
    ("run interrupt", EXIT_INTERRUPTED, ("run", "flow.py:with_question", "-i", '{"topic": "y"}'), ""),
    ("run breakpoint", EXIT_INTERRUPTED, ("run", "flow.py:paused", "-i", '{"topic": "y"}'), ""),
    ("run bad target", EXIT_USAGE, ("run", "flow.py:nothing"), ""),
    ("run bad input", EXIT_USAGE, ("run", "flow.py:graph", "-i", "[1, 2]"), ""),
    ("run bad durability", EXIT_USAGE, ("run", "flow.py:graph", "--durability", "never"), ""),
    ("resume answers", EXIT_OK, ("resume", "flow.py:with_question", "waiting", "--resume", '"yes"'), ""),
    ("resume finished", EXIT_OK, ("resume", "flow.py:graph", "done"), ""),
    ("resume fails again", EXIT_FAILED, ("resume", "flow.py:graph", "failed"), ""),
    ("resume unknown thread", EXIT_USAGE, ("resume", "flow.py:graph", "nosuch"), ""),
    ("resume nothing to answer", EXIT_USAGE, ("resume", "flow.py:graph", "done", "--resume", "1"), ""),
    ("update", EXIT_OK, ("update", "done", "--graph", "flow.py:graph", "--set", "topic=z"), ""),
    ("update unknown thread", EXIT_USAGE, ("update", "nosuch", "--graph", "flow.py:graph", "--set", "topic=z"), ""),
    ("update unknown channel", EXIT_USAGE, ("update", "done", "--graph", "flow.py:graph", "--set", "nope=1"), ""),
    (
        "update unknown node",
        EXIT_USAGE,
        ("update", "done", "-g", "flow.py:graph", "-s", "topic=z", "--as-node", "x"),
        "",
    ),
    ("update without --set", EXIT_USAGE, ("update", "done", "--graph", "flow.py:graph"), ""),
    ("draw", EXIT_OK, ("draw", "flow.py:graph"), ""),
    ("draw bad format", EXIT_USAGE, ("draw", "flow.py:graph", "--format", "png"), ""),
    ("threads", EXIT_OK, ("threads",), ""),
    ("threads missing db", EXIT_USAGE, ("threads", "--db", "missing.db"), ""),
    ("history", EXIT_OK, ("history", "done"), ""),
    ("history unknown thread", EXIT_USAGE, ("history", "nosuch"), ""),
    ("history --limit 0", EXIT_USAGE, ("history", "done", "--limit", "0"), ""),
    ("state", EXIT_OK, ("state", "waiting"), ""),
    ("state unknown thread", EXIT_USAGE, ("state", "nosuch"), ""),
    ("state unknown key", EXIT_USAGE, ("state", "done", "--key", "nosuch"), ""),
    ("state unknown checkpoint", EXIT_USAGE, ("state", "done", "--checkpoint", "ffff"), ""),
    ("diff", EXIT_OK, ("diff", "done", "failed"), ""),
    ("diff unknown thread", EXIT_USAGE, ("diff", "done", "nosuch"), ""),
    ("fork", EXIT_OK, ("fork", "done", "--to", "copy"), ""),
    ("fork into an existing thread", EXIT_USAGE, ("fork", "done", "--to", "failed"), ""),
    ("fork unknown thread", EXIT_USAGE, ("fork", "nosuch", "--to", "copy"), ""),
    ("delete", EXIT_OK, ("delete", "done", "--yes"), ""),
    ("delete declined", EXIT_FAILED, ("delete", "done"), "n\n"),
    ("delete unanswered", EXIT_USAGE, ("delete", "done"), ""),
    ("delete unknown thread", EXIT_USAGE, ("delete", "nosuch", "--yes"), ""),
    ("export", EXIT_OK, ("export", "done"), ""),
    ("export unknown thread", EXIT_USAGE, ("export", "nosuch"), ""),
    ("import", EXIT_OK, ("import", "done.jsonl", "--thread", "again"), ""),
    ("import an existing thread", EXIT_USAGE, ("import", "done.jsonl"), ""),
    ("import not an export", EXIT_USAGE, ("import", "notes.txt"), ""),
    ("import no file", EXIT_USAGE, ("import", "nosuch.jsonl"), ""),
    ("db migrate", EXIT_OK, ("db", "migrate"), ""),
    ("db migrate on a folder", EXIT_USAGE, ("db", "migrate", "--db", "."), ""),
    ("db stats", EXIT_OK, ("db", "stats"), ""),
    ("db stats missing db", EXIT_USAGE, ("db", "stats", "--db", "missing.db"), ""),
    ("db stats top 0", EXIT_USAGE, ("db", "stats", "--top", "0"), ""),
    ("db vacuum", EXIT_OK, ("db", "vacuum"), ""),
    ("db prune", EXIT_OK, ("db", "prune", "--keep-last", "1", "--yes"), ""),
    ("db prune declined", EXIT_FAILED, ("db", "prune", "--keep-last", "1"), "no\n"),
    ("db prune --keep-last 0", EXIT_USAGE, ("db", "prune", "--keep-last", "0"), ""),
    ("demo in a missing folder", EXIT_USAGE, ("demo", "--db", "no/such/demo.db"), ""),
    ("unknown command", EXIT_USAGE, ("nosuch",), ""),
    ("unknown option", EXIT_USAGE, ("threads", "--nosuch"), ""),
]


@pytest.mark.parametrize(("code", "args", "stdin"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_command_ends_with_the_documented_code(
    store: pathlib.Path, tmp_path: pathlib.Path, code: int, args: tuple[str, ...], stdin: str
) -> None:
    for name in ("flow.py", "t.db", "done.jsonl", "notes.txt"):
        shutil.copy(store / name, tmp_path / name)
    res = Cli(tmp_path)(*args, stdin=stdin, env={"PLAIT_DB": "t.db"})
    assert res.code == code, f"{args}: {res.code}\n{res.out}\n{res.err}"
    if code in (EXIT_FAILED, EXIT_USAGE):
        res.one_line()  # one line, never a traceback (the prompt of a declined question aside)
    else:
        assert "Traceback" not in res.err


def test_the_docs_table_is_the_code_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", text, re.MULTILINE))
    assert set(rows) == {"0", "1", "2", "3", "130"}
    assert {int(k) for k in rows} == {EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, 130}
    assert "paused" in rows["3"] and "not found" in rows["2"] and "failed" in rows["1"]
