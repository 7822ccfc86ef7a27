"""The lines a run prints as it goes: a retry reads as a retry, a failure gives its cause with
one step number, a ``Send`` worker is named with its item, and only the stopped run's error
says what to run next, in plait commands."""

from __future__ import annotations

import pathlib

from plait.cli import EXIT_FAILED, EXIT_OK

from ._cli_support import Cli
from .test_hints import no_python

WORKERS = """
import pathlib
from plait import END, START, AppendList, Graph, RetryPolicy, Send, StateSchema

schema = StateSchema.builder().add_lww("docs").add("done", AppendList()).build()
FAST = RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=0.0)

def split(state):
    return {}

def work(item):
    marker = pathlib.Path(item["doc"] + ".tried")
    if item["doc"] == "flaky" and not marker.exists():
        marker.write_text("once")
        raise ConnectionError("flaky backend")
    if item["doc"] == "broken":
        raise ValueError("cannot parse")
    return {"done": [item["doc"]]}

graph = Graph(schema)
graph.add_node("split", split).add_node("work", work, retry=FAST)
graph.add_edge(START, "split")
graph.add_conditional_edges("split", lambda s: [Send("work", {"doc": d}) for d in s["docs"]])
graph.add_edge("work", END)
"""


def _steps(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.startswith("  step ")]


def test_a_retried_task_prints_as_a_retry_and_names_its_item(cli: Cli) -> None:
    cli.write("workers.py", WORKERS)
    res = cli("run", "workers.py:graph", "-i", '{"docs": ["flaky", "fine"]}', "-t", "w", "--db", "t.db")
    assert res.code == EXIT_OK, res.err
    assert pathlib.Path(cli.folder / "flaky.tried").exists()
    lines = _steps(res.out)
    retry = [line for line in lines if "retrying" in line]
    assert retry == ['step 2  work {"doc": "flaky"}  attempt 1 failed, retrying: ConnectionError: flaky backend']
    assert 'step 2  work {"doc": "fine"}  wrote done' in lines
    assert 'step 2  work {"doc": "flaky"}  wrote done' in lines
    assert not any("failed:" in line or "super-step" in line for line in lines)
    no_python(res.out + res.err)


def test_a_failure_prints_its_cause_once_and_the_stopped_run_says_what_to_run(cli: Cli) -> None:
    cli.write("workers.py", WORKERS)
    res = cli("run", "workers.py:graph", "-i", '{"docs": ["broken"]}', "-t", "b", "--db", "t.db")
    assert res.code == EXIT_FAILED
    lines = _steps(res.out)
    assert 'step 2  work {"doc": "broken"}  attempt 1 failed, retrying: ValueError: cannot parse' in lines
    assert 'step 2  work {"doc": "broken"}  failed (attempt 2): ValueError: cannot parse' in lines
    assert not any("resum" in line or "super-step" in line for line in lines)  # advice only once stopped
    no_python(res.out + res.err)
    assert "plait resume workers.py:graph b --db t.db re-runs only the tasks that did not finish" in res.one_line()
    res = cli("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "c", "--db", "t.db")
    assert "step 2  check  failed: ValueError: bad topic" in _steps(res.out)
    no_python(res.out)
