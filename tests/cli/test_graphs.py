"""``plait run`` and ``plait resume``: steps numbered as history numbers them, and a resume
that waits for the run holding the thread (``--wait``)."""

from __future__ import annotations

import json
import pathlib
import queue
import subprocess

import pytest

from plait import SqliteCheckpointer
from plait.cli import EXIT_OK, main

from ._cli_support import Cli, command, expect, lines_of


def test_run_numbers_steps_as_history_does(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cli: Cli
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db"]) == EXIT_OK
    ran = capsys.readouterr().out.splitlines()
    assert main(["history", "t", "--db", "t.db", "--json"]) == EXIT_OK
    history = {cp["step"]: cp for cp in json.loads(capsys.readouterr().out)}
    for line in ran:  # "  step N  NODE  wrote KEYS": N is the checkpoint holding NODE's writes
        words = line.split()
        if words[:1] == ["step"] and words[2] != "checkpoint":
            step, node = int(words[1]), words[2]
            assert node in history[step]["metadata"]["writes"], (line, history[step]["metadata"])
    assert "  step 1  greet  wrote log" in ran
    assert any(line.startswith("  step 1  checkpoint ") for line in ran)


def test_resume_waits_for_the_run_holding_the_thread(cli: Cli, tmp_path: pathlib.Path) -> None:
    assert cli("run", "flow.py:with_question", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db").code == 3
    store = SqliteCheckpointer(tmp_path / "t.db")
    try:
        lease = store.take_lease("t", "someone-else", ttl=600)  # alive: this process
        with subprocess.Popen(
            [*command(), "resume", "flow.py:with_question", "t", "--resume", '"yes"', "--db", "t.db", "--wait", "60"],
            cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as resume:  # fmt: skip
            assert resume.stdout is not None and resume.stderr is not None
            err: queue.Queue[str] = lines_of(resume.stderr)
            said = expect(err, "waiting up to 60s for someone-else", [])
            assert "which holds t" in said
            store.release_lease(lease)  # the holder is done: the resume goes on
            assert resume.wait(60) == 0, resume.stderr.read()
            assert '"yes"' in resume.stdout.read()
    finally:
        store.close()
    done = cli("resume", "flow.py:with_question", "t", "--db", "t.db", "--wait", "5")
    assert done.code == 0 and "is idle: its last run is done" in done.out and "nothing to resume" in done.out


CONTEXT_FLOW = """
from dataclasses import dataclass
from typing import Annotated, TypedDict
from plait import END, START, AppendList, Graph, interrupt

class S(TypedDict):
    log: Annotated[list, AppendList()]

@dataclass
class Ctx:
    user: str

def greet(state, ctx):
    return {"log": ["hello " + ctx.context.user]}

def ask(state, ctx):
    interrupt("go on?")
    return {"log": ["bye " + ctx.context.user]}

def graph():
    g = Graph(S, context=Ctx).add_node("greet", greet).add_node("ask", ask)
    return g.add_edge(START, "greet").add_edge("greet", "ask").add_edge("ask", END)
"""


def test_run_and_resume_pass_context_to_the_nodes(cli: Cli) -> None:
    cli.write("ctxflow.py", CONTEXT_FLOW)
    run = cli("run", "ctxflow.py:graph", "-t", "t", "--db", "t.db", "--context", '{"user": "ann"}')
    assert run.code == 3, run.err
    resumed = cli(
        "resume", "ctxflow.py:graph", "t", "--resume", "1", "--db", "t.db", "--context", '{"user": "bo"}', "--json"
    )
    assert resumed.code == 0, resumed.err
    assert resumed.json()["values"]["log"] == ["hello ann", "bye bo"]
    bad = cli("run", "ctxflow.py:graph", "-t", "u", "--db", "t.db", "--context", "[1]")
    assert bad.code == 2 and "--context is a JSON object" in bad.err
    missing = cli("run", "ctxflow.py:graph", "-t", "v", "--db", "t.db")
    assert missing.code == 2, "a context with a required field is never left None for the nodes"
    assert "ContextError: the graph's context type Ctx does not fit what was given: missing 'user'" in missing.err
    assert "--context '{...}'" in missing.err and "invoke(" not in missing.err
    assert "v" not in [t["thread_id"] for t in cli("threads", "--db", "t.db", "--json").json()], "nothing ran"
