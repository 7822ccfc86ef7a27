"""plait db prune: --dry-run drops nothing, a confirmation is asked (--yes for scripts), and on
SQLite the space is given back to the file system."""

from __future__ import annotations

import os

from plait.cli import EXIT_FAILED, EXIT_OK

from ._cli_support import Cli

LOOP = """
    from plait import END, START, AppendList, Graph, StateSchema

    schema = StateSchema.builder().add_lww("n", default=0).add_lww("blob").add("log", AppendList()).build()

    def step(state):
        n = state["n"] + 1
        return {"n": n, "blob": f"{n}:" + "x" * 4000, "log": [n]}

    graph = Graph(schema)
    graph.add_node("step", step).add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: END if s["n"] >= 300 else "step", {"step": "step", END: END})
"""


def size(cli: Cli, name: str) -> int:
    return sum(os.path.getsize(cli.folder / p) for p in (name, name + "-wal") if (cli.folder / p).exists())


def test_prune_reclaims_the_space_of_what_it_drops(cli: Cli) -> None:
    cli.write("loop.py", LOOP)
    assert cli("run", "loop.py:graph", "-t", "big", "--db", "t.db", "--json").code == EXIT_OK
    before = size(cli, "t.db")
    dry = cli("db", "prune", "--keep-last", "5", "--dry-run", "--db", "t.db", "--json").json()
    assert dry["dry_run"] is True and dry["dropped"] == 296 and dry["exact"] is True
    assert size(cli, "t.db") == before
    assert len(cli("history", "big", "--db", "t.db", "--json").json()) == 301  # nothing dropped
    res = cli("db", "prune", "--keep-last", "5", "--yes", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    pruned = res.json()
    assert pruned["dropped"] == 296 and pruned["threads"][0]["thread_id"] == "big"
    after = size(cli, "t.db")
    assert after < before / 4, (before, after)
    assert pruned["bytes_before"] >= before * 0.9 and pruned["bytes_freed"] > before / 2
    state = cli("state", "big", "--db", "t.db", "--json").json()
    assert state["values"]["n"] == 300 and len(state["values"]["log"]) == 300  # the head is whole
    assert len(cli("history", "big", "--db", "t.db", "--json").json()) == 5


def test_prune_asks_first_and_a_no_drops_nothing(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    res = cli("db", "prune", "--keep-last", "1", "--db", "t.db", stdin="n\n")
    assert res.code == EXIT_FAILED
    assert "drop 2 checkpoints from 1 thread in t.db, keeping the 1 newest of each branch? [y/N]" in res.err
    assert len(cli("history", "t", "--db", "t.db", "--json").json()) == 3
    res = cli("db", "prune", "--keep-last", "1", "--db", "t.db", stdin="y\n")
    assert res.code == EXIT_OK and "dropped 2 checkpoints from 1 thread (keeping 1 per branch)" in res.out
    assert "freed" in res.out


def test_dry_run_lists_what_would_go(cli: Cli) -> None:
    for t in ("a", "b"):
        cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", t, "--db", "t.db")
    res = cli("db", "prune", "--keep-last", "2", "--dry-run", "--db", "t.db")
    assert res.code == EXIT_OK
    assert "would drop 2 checkpoints from 2 threads (keeping 2 per branch):" in res.out
    assert "a: 1 of 3" in res.out and "b: 1 of 3" in res.out
    res = cli("db", "prune", "--keep-last", "5", "--db", "t.db")
    assert res.code == EXIT_OK and "nothing to prune" in res.out  # nothing to ask about


def test_a_thread_with_a_side_branch_gives_an_upper_bound_in_a_dry_run(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    assert cli("resume", "flow.py:graph", "t", "--step", "0", "--db", "t.db").code == EXIT_OK  # time travel
    threads = cli("threads", "--db", "t.db", "--json").json()
    assert threads[0]["checkpoints"] == 6  # the run, the replay's copy of step 0, and the replayed steps
    dry = cli("db", "prune", "--keep-last", "1", "--dry-run", "--db", "t.db", "--json").json()
    assert dry["exact"] is False and dry["threads"][0]["dropped"] == 5
    done = cli("db", "prune", "--keep-last", "1", "--yes", "--thread", "t", "--db", "t.db", "--json").json()
    assert done["exact"] is True and done["dropped"] <= 5


def test_prune_of_an_unknown_thread_is_not_found(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    res = cli("db", "prune", "--keep-last", "1", "--thread", "nope", "--yes", "--db", "t.db")
    assert res.code == 2 and "no thread 'nope'" in res.one_line()
