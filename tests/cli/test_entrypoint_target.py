"""The command line loads an entrypoint (``file.py:workflow``) as the graph it runs as: its
input is the ``input`` channel, its return value the ``output`` one, and its threads read
like any graph's."""

from __future__ import annotations

from plait.cli import EXIT_OK

from ._cli_support import Cli

WORKFLOW = """
    from plait import entrypoint, task

    @task
    def double(x):
        return 2 * x

    @entrypoint()
    def workflow(n, *, previous):
        return (previous or 0) + sum(f.result() for f in [double(i) for i in range(n)])
"""


def test_plait_run_and_state_work_on_an_entrypoint(cli: Cli) -> None:
    cli.write("wf.py", WORKFLOW)
    res = cli("run", "wf.py:workflow", "-i", '{"input": 3}', "-t", "t", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["output"] == 6
    res = cli("run", "wf.py:workflow", "-i", '{"input": 2}', "-t", "t", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["output"] == 8, "the second run got the first's value as previous"
    res = cli("state", "t", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["previous"] == 8
