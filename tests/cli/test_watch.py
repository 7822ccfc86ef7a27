"""``plait watch``: the real console script follows a run in this process, step by step.

The run's nodes wait on events the test sets only once ``watch`` has printed what came
before, so the test is driven by what ``watch`` shows, never by the clock; ``watch`` looks
every 20 ms, or only when the store's change feed says the thread changed.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import threading
from typing import Any

import pytest

from plait import END, START, AppendList, Graph, SqliteCheckpointer, StateSchema
from plait.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

from ._cli_support import FLOW, Cli, command, expect, lines_of


@pytest.mark.parametrize("interval", ["0.02", "600"])
def test_watch_follows_a_running_thread_until_it_stops(cli: Cli, tmp_path: pathlib.Path, interval: str) -> None:
    """With ``--interval 600`` only the store's change feed can wake ``watch`` in time."""
    gates = {name: threading.Event() for name in ("plan", "fast", "slow")}

    def node(name: str) -> Any:
        def run(state: Any) -> dict[str, Any]:
            assert gates[name].wait(60), f"{name} was never released"
            return {"log": [name]}

        return run

    graph = Graph(StateSchema.builder().add("log", AppendList()).build())
    for name in gates:
        graph.add_node(name, node(name))
    graph.add_edge(START, "plan").add_edge("plan", "fast").add_edge("plan", "slow")
    graph.add_edge("fast", END).add_edge("slow", END)
    store = SqliteCheckpointer(tmp_path / "w.db")
    app = graph.compile(checkpointer=store)
    started = threading.Event()
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            for _ in app.stream({"log": []}, thread_id="live", mode="events"):
                started.set()
        except BaseException as exc:
            errors.append(exc)
            started.set()

    runner = threading.Thread(target=drive)
    runner.start()
    try:
        assert started.wait(60)  # the input checkpoint is committed: the run holds the thread
        with subprocess.Popen(
            [*command(), "watch", "live", "--db", "w.db", "--interval", interval],
            cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as watch:  # fmt: skip
            assert watch.stdout is not None and watch.stderr is not None
            out = lines_of(watch.stdout)
            seen: list[str] = []
            assert "(busy, held by " in expect(out, "watching live in w.db", seen)
            assert "(input)" in expect(out, "step 0  checkpoint", seen)
            gates["plan"].set()
            assert "wrote plan: log  next fast, slow" in expect(out, "step 1  checkpoint", seen)
            gates["fast"].set()
            # fast is saved while slow still runs: watch shows the step's tasks as they finish
            assert expect(out, "fast  finished", seen).strip() == "step 2  fast  finished"
            gates["slow"].set()
            assert "fast: log; slow: log" in expect(out, "step 2  checkpoint", seen)
            assert "live stopped: idle at step 2" in expect(out, "stopped", seen)
            assert watch.wait(60) == 0, watch.stderr.read()
    finally:
        for gate in gates.values():
            gate.set()
        runner.join(60)
        store.close()
    assert not errors, errors


@pytest.mark.parametrize(
    ("graph", "topic", "code", "status"),
    [("graph", "x", EXIT_OK, "idle"), ("graph", "bad", EXIT_FAILED, "error"), ("with_question", "x", 3, "interrupted")],
)
def test_watch_of_a_thread_at_rest_says_how_it_stands_and_exits_by_it(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    validate: Any,
    graph: str,
    topic: str,
    code: int,
    status: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flow.py").write_text(FLOW)
    main(["run", f"flow.py:{graph}", "-i", json.dumps({"topic": topic}), "-t", "t", "--db", "t.db", "--json"])
    capsys.readouterr()
    assert main(["watch", "t", "--db", "t.db", "--json"]) == code
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for line in lines:
        validate("watch", line)
    assert [x["kind"] for x in lines][0] == "watching" and lines[-1]["kind"] == "stopped"
    assert lines[0]["status"] == lines[-1]["status"] == status
    assert main(["watch", "nosuch", "--db", "t.db"]) == EXIT_USAGE
