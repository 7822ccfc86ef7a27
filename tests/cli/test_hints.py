"""What the command line tells an operator to do next names plait commands, spelled with the
graph, store and namespace that were given, never Python calls."""

from __future__ import annotations

import json
import pathlib

import pytest

from plait.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

PYTHON_CALLS = ("invoke(", "list_threads()", "get_state_history()", "update_state", "thread_id=", "setup()")


def no_python(text: str) -> None:
    for call in PYTHON_CALLS:
        assert call not in text, text


def test_a_failed_run_says_which_resume_command_continues_it(cli: Cli) -> None:
    res = cli("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "tb", "--db", "f.db", "--namespace", "ns")
    assert res.code == EXIT_FAILED
    line = res.one_line()
    assert line.startswith("error: NodeError: node 'check' failed in step 2 of thread 'tb': ValueError: bad topic")
    assert "plait resume flow.py:graph tb --db f.db --namespace ns re-runs only the tasks that did not finish" in line
    no_python(line)
    assert "step 2  check  failed" in res.out + res.err, "the progress line and the error name one step"


def test_a_failed_run_with_plait_db_needs_no_db_in_its_hint(cli: Cli) -> None:
    res = cli("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "tb", env={"PLAIT_DB": "f.db"})
    assert "plait resume flow.py:graph tb re-runs" in res.one_line()


def test_an_unknown_thread_says_how_to_list_the_threads(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    for args in (("state", "nope"), ("history", "nope"), ("export", "nope"), ("diff", "t", "nope")):
        res = cli(*args, "--db", "t.db")
        assert res.code == EXIT_USAGE
        line = res.one_line()
        assert "no thread 'nope' in t.db; list the threads with: plait threads --db t.db" in line, line
        no_python(line)
    res = cli("state", "t", "--checkpoint", "ffff", "--db", "t.db")
    assert "list its checkpoints with: plait history t --db t.db" in res.one_line()


def test_a_paused_run_says_how_to_go_on(cli: Cli) -> None:
    res = cli("run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "t3", "--db", "t.db")
    assert res.code == EXIT_INTERRUPTED
    assert "publish q?" in res.out
    assert "resume with: plait resume flow.py:with_question t3 --resume JSON --db t.db" in res.out
    res = cli("run", "flow.py:paused", "-i", '{"topic": "q"}', "-t", "t4", "--db", "t.db")
    assert res.code == EXIT_INTERRUPTED
    assert "paused before: check; continue with: plait resume flow.py:paused t4 --db t.db" in res.out


def test_the_hint_after_fork_names_the_graph_that_was_passed(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "t.db")
    res = cli("fork", "a", "--to", "b", "--step", "0", "--graph", "flow.py:graph", "--set", "topic=y", "--db", "t.db")
    assert res.code == EXIT_OK, res.err
    assert "continue it with: plait resume flow.py:graph b --db t.db" in res.out
    assert "MODULE:GRAPH" not in res.out
    res = cli("resume", "flow.py:graph", "b", "--db", "t.db", "--json")  # the hint works
    assert res.code == EXIT_OK and res.json()["values"]["log"] == ["hello y", "checked"]
    res = cli("fork", "a", "--to", "c", "--db", "t.db")  # no graph given: say what is needed
    assert "continue it with: plait resume MODULE:GRAPH c --db t.db" in res.out


def test_resume_on_a_finished_thread_says_there_is_nothing_to_do(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "t.db")
    before = cli("history", "a", "--db", "t.db", "--json").json()
    res = cli("resume", "flow.py:graph", "a", "--db", "t.db")
    assert res.code == EXIT_OK
    assert "thread a is idle: its last run is done" in res.out and "nothing to resume" in res.out
    assert "values" not in res.out  # nothing is reprinted
    assert "plait run flow.py:graph --thread a --input JSON --db t.db" in res.out
    res = cli("resume", "flow.py:graph", "a", "--db", "t.db", "--json")
    assert res.json()["status"] == "done" and res.json()["ran"] is False
    assert cli("history", "a", "--db", "t.db", "--json").json() == before  # and nothing ran


def test_a_missing_store_says_how_to_create_one(cli: Cli) -> None:
    line = cli("threads", "--db", "none.db").one_line()
    assert "create the store with: plait db migrate --db none.db" in line


TWO_QUESTIONS = """
from plait import END, START, Graph, StateSchema, interrupt

schema = StateSchema.builder().add_lww("a").add_lww("b").build()
graph = Graph(schema)
graph.add_node("left", lambda s: {"a": interrupt("left?")})
graph.add_node("right", lambda s: {"b": interrupt("right?")})
graph.add_edge(START, "left").add_edge(START, "right").add_edge("left", END).add_edge("right", END)
"""


def test_an_answer_no_interrupt_waits_for_is_refused_with_what_applies(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "done", "--db", "t.db")
    res = cli("resume", "flow.py:graph", "done", "--resume", '"yes"', "--db", "t.db")
    assert res.code == EXIT_USAGE
    line = res.one_line()
    assert "thread done" in line and "is idle (its last run is done): no interrupt waits for an answer" in line
    assert "plait run flow.py:graph --thread done --input JSON --db t.db" in line
    assert "plait fork done --to NEW --db t.db" in line
    no_python(line)
    cli("run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "failed", "--db", "t.db")
    line = cli("resume", "flow.py:graph", "failed", "--resume", '"yes"', "--db", "t.db").one_line()
    assert "waits for no answer: it has work left to do" in line
    assert "plait resume flow.py:graph failed --db t.db" in line
    no_python(line)
    # an answer at a past checkpoint: the command that applies goes on from that checkpoint
    line = cli("resume", "flow.py:graph", "done", "--resume", '"yes"', "--step", "1", "--db", "t.db").one_line()
    first = cli("state", "done", "--step", "1", "--db", "t.db", "--json").json()["checkpoint_id"]
    assert f"Continue it without --resume: plait resume flow.py:graph done --checkpoint {first} --db t.db" in line


def test_several_waiting_interrupts_are_answered_by_id(cli: Cli) -> None:
    cli.write("two.py", TWO_QUESTIONS)
    assert cli("run", "two.py:graph", "-t", "q", "--db", "t.db").code == EXIT_INTERRUPTED
    ids = [i["id"] for i in cli("state", "q", "--db", "t.db", "--json").json()["interrupts"]]
    res = cli("resume", "two.py:graph", "q", "--resume", '"yes"', "--db", "t.db")
    assert res.code == EXIT_USAGE
    line = res.one_line()
    assert "has 2 interrupts waiting" in line and ids[0] in line and "--resume '{" in line
    no_python(line)
    answer = json.dumps({ids[0]: 1, ids[1]: 2})
    res = cli("resume", "two.py:graph", "q", "--resume", answer, "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert sorted([res.json()["values"]["a"], res.json()["values"]["b"]]) == [1, 2]


NEEDS_CONTEXT = """
from plait import END, START, Graph, StateSchema, interrupt

schema = StateSchema.builder().add_lww("who").add_lww("answer").build()

def ask(state, ctx):
    return {"who": ctx.context["user"], "answer": interrupt("go?")}

graph = Graph(schema)
graph.add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
"""


def test_the_resume_hint_repeats_the_context_the_run_had(cli: Cli) -> None:
    cli.write("ctx.py", NEEDS_CONTEXT)
    cli.write("ctx.json", '{"user": "ann"}')
    res = cli("run", "ctx.py:graph", "-t", "c1", "--db", "t.db", "--context", '{"user": "bob"}')
    assert res.code == EXIT_INTERRUPTED, res.err
    hint = 'resume with: plait resume ctx.py:graph c1 --resume JSON --db t.db --context \'{"user": "bob"}\''
    assert hint in res.out
    res = cli("run", "ctx.py:graph", "-t", "c2", "--db", "t.db", "--context", "@ctx.json")
    assert "resume with: plait resume ctx.py:graph c2 --resume JSON --db t.db --context @ctx.json" in res.out
    res = cli("resume", "ctx.py:graph", "c2", "--resume", '"yes"', "--db", "t.db", "--context", "@ctx.json", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"] == {"who": "ann", "answer": "yes"}
    res = cli("run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "c3", "--db", "t.db")
    assert "--context" not in res.out  # none given, none repeated


def test_a_resume_refused_by_the_library_is_told_in_commands(tmp_path: pathlib.Path) -> None:
    """What the engine says of an answer to a thread that waits for none names a Python
    call; the command line's message names the commands instead."""
    from plait.cli.invocation import Invocation
    from plait.cli.messages import describe
    from plait.cli.output import Out
    from plait.engine.pending import resume_writes
    from plait.errors import InvalidResumeError

    with pytest.raises(InvalidResumeError) as caught:
        resume_writes("t1", [], "yes")  # the library's own refusal, as a run meets it
    assert "invoke(None" in str(caught.value)
    inv = Invocation(Out(), str(tmp_path / "t.db"), debug=False)
    inv.target = "flow.py:graph"
    said = describe(caught.value, inv)
    assert "invoke(" not in said and "has no interrupt waiting for an answer" in said
    assert "continue it without --resume: plait resume flow.py:graph t1 --db " in said
    assert "run it again with new input: plait run flow.py:graph --thread t1 --input JSON --db " in said
