"""``plait threads --namespaces`` lists each thread's subgraph runs after it, and ``plait
history`` / ``plait state`` on a parent name the child namespaces its steps wrote; on a
SQLite file, where a subgraph's run has no thread row of its own."""

from __future__ import annotations

import json
import operator
import pathlib
from typing import Annotated, Any, TypedDict

import pytest

from plait import START, Graph, SqliteCheckpointer, interrupt
from plait.cli import EXIT_OK, main


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _ask(state: Any) -> Any:
    return {"log": [interrupt("ok?")]}


@pytest.fixture
def paused_in_subgraph(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    inner = Graph(State).add_node("ask", _ask).add_edge(START, "ask").compile()
    outer = Graph(State).add_node("first", lambda s: {"log": ["first"]}).add_node("research", inner)
    with outer.add_edge(START, "first").add_edge("first", "research").compile(SqliteCheckpointer("t.db")) as app:
        app.invoke({"log": []}, thread_id="t")
        (child,) = app.get_state("t", subgraphs=True).subgraphs or {}
    return child


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert main([*args, "--db", "t.db", "--json"]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_threads_namespaces_lists_the_subgraph_runs(
    paused_in_subgraph: str, capsys: pytest.CaptureFixture[str], validate: Any
) -> None:
    # a subgraph's run has a thread row of its own (listed with the rest, most recent first)
    assert sorted(r["namespace"] for r in _json(capsys, "threads")) == ["", paused_in_subgraph]
    rows = _json(capsys, "threads", "--namespaces")
    validate("threads", rows)
    assert [(r["thread_id"], r["namespace"], r["status"]) for r in rows] == [
        ("t", "", "interrupted"),
        ("t", paused_in_subgraph, "interrupted"),
    ]


def test_history_and_state_name_the_child_namespaces(
    paused_in_subgraph: str, capsys: pytest.CaptureFixture[str], validate: Any
) -> None:
    history = _json(capsys, "history", "t")
    validate("history", history)
    assert [h.get("subgraphs") for h in history] == [[paused_in_subgraph], None]  # research pending, input
    state = _json(capsys, "state", "t")
    validate("state", state)
    assert state["subgraphs"] == [paused_in_subgraph]
    capsys.readouterr()
    assert main(["history", "t", "--db", "t.db"]) == EXIT_OK
    table = capsys.readouterr().out
    assert "subgraphs" in table and paused_in_subgraph in table
    assert main(["state", "t", "--db", "t.db"]) == EXIT_OK
    assert f"subgraphs: {paused_in_subgraph} (plait state t --namespace NS)" in capsys.readouterr().out
    inner = _json(capsys, "state", "t", "--namespace", paused_in_subgraph)
    assert inner["next"] == ["ask"]
