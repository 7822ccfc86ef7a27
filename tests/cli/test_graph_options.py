"""A graph run by the CLI keeps the options it was compiled with: the CLI rebinds it on its own
store with ``CompiledGraph.bind``, which loses none (``executor=`` was lost before)."""

from __future__ import annotations

from plait.cli import EXIT_INTERRUPTED, EXIT_OK

from ._cli_support import Cli

FLOW = """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from plait import END, START, AppendList, Graph, StateSchema

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mine")


    def node(state):
        return {"threads": [threading.current_thread().name.split("_")[0]]}


    builder = Graph(StateSchema.builder().add("threads", AppendList()).build())
    builder.add_node("a", node).add_node("b", node)
    builder.add_edge(START, "a").add_edge(START, "b").add_edge("a", END).add_edge("b", END)
    graph = builder.compile(executor=pool, interrupt_before=["b"], checkpointer="own.db")
"""


def test_a_graph_run_on_the_commands_store_keeps_its_executor_and_breakpoints(cli: Cli) -> None:
    cli.write("flow.py", FLOW)
    res = cli("run", "flow:graph", "-i", "{}", "-t", "t", "--db", "cli.db", "--json")
    assert res.code == EXIT_INTERRUPTED, res.err  # paused before b: the breakpoint came along
    assert res.json()["status"] == "paused"
    assert (cli.folder / "cli.db").exists()
    res = cli("resume", "flow:graph", "t", "--db", "cli.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["threads"] == ["mine", "mine"], res.out
