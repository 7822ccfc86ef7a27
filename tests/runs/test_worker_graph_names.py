"""`plait worker --graph NAME=MODULE:GRAPH` and `--config langgraph.json` name graphs as
`plait serve` does: a run submitted under NAME is run by the graph given that name; the old
`--graph MODULE:GRAPH` form still runs runs submitted under the target itself; a run of a
name the worker lacks says which option would give it the graph."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plait.runs import Runs

from . import _run_flows as flows
from ._runs_support import started, wait_for

pytestmark = pytest.mark.postgres


def test_a_worker_runs_graphs_by_the_names_given_on_the_command_line_and_in_a_config(
    runs_db: tuple[str, str], tmp_path: Path
) -> None:
    dsn, schema = runs_db
    (tmp_path / "conf").mkdir()
    relative = os.path.relpath(flows.FILE, tmp_path / "conf")
    config = {"graphs": {"asker": f"{relative}:asking"}, "dependencies": ["."]}
    (tmp_path / "conf" / "langgraph.json").write_text(json.dumps(config))
    command = [sys.executable, "-m", "plait", "worker", "--db", dsn, "--schema", schema, "--poll", "0.5"]
    command += ["--graph", f"counter={flows.name('steps')}", "--graph", flows.name("single")]
    command += ["--config", str(tmp_path / "conf" / "langgraph.json")]
    log = tmp_path / "worker.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_for(functools.partial(started, log), 30, "the worker to start")
        assert "3 graph(s)" in log.read_text()
        with Runs(dsn, schema=schema) as runs:
            named = runs.submit("counter", {"steps": 3, "tag": "n"})
            old = runs.submit(flows.name("single"), {})
            configured = runs.submit("asker", {})
            unknown = runs.submit("nobody", {})
            assert runs.join(named, timeout=60).output["log"] == ["n:0", "n:1", "n:2"]
            assert runs.join(old, timeout=60).output["log"] == ["one"]
            assert runs.join(configured, timeout=60).status == "interrupted"
            lacking = runs.join(unknown, timeout=60)
        assert lacking.status == "error" and lacking.error is not None
        assert "--graph nobody=MODULE:GRAPH" in lacking.error["message"]
        assert "'counter'" in lacking.error["message"] and "'asker'" in lacking.error["message"]
    finally:
        proc.kill()
        proc.wait(10)


def test_a_worker_refuses_two_graphs_of_one_name_and_a_config_it_cannot_read(
    runs_db: tuple[str, str], tmp_path: Path
) -> None:
    dsn, schema = runs_db
    base = [sys.executable, "-m", "plait", "worker", "--db", dsn, "--schema", schema]
    twice = [*base, "--graph", f"a={flows.name('steps')}", "--graph", f"a={flows.name('single')}"]
    done = subprocess.run(twice, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "two graphs are named 'a'" in done.stderr
    done = subprocess.run(
        [*base, "--config", str(tmp_path / "none.json")], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and "none.json" in done.stderr
