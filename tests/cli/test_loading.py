"""MODULE:GRAPH: a file target is loaded as `python FILE.py` would see it, a file in a package
as part of its package, and any failure to load is one line and exit code 2."""

from __future__ import annotations

import pytest

from plait.cli import EXIT_OK, EXIT_USAGE

from ._cli_support import Cli

SIBLING_FLOW = """
    from helpers import greet
    from plait import END, START, Graph, StateSchema

    graph = Graph(StateSchema.builder().add_lww("topic").add_lww("greeting").build())
    graph.add_node("greet", greet).add_edge(START, "greet").add_edge("greet", END)
"""


def test_a_file_target_imports_its_sibling_modules(cli: Cli) -> None:
    cli.write("flows/flow.py", SIBLING_FLOW)
    cli.write("flows/helpers.py", "def greet(state):\n    return {'greeting': 'hi ' + state['topic']}\n")
    res = cli("run", "flows/flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["greeting"] == "hi x"


def test_a_file_in_a_package_is_imported_as_part_of_it(cli: Cli) -> None:
    cli.write("app/__init__.py", "")
    cli.write("app/flows/__init__.py", "")
    cli.write("app/flows/helpers.py", "def greet(state):\n    return {'greeting': 'hello ' + state['topic']}\n")
    cli.write("app/flows/main.py", SIBLING_FLOW.replace("from helpers import", "from .helpers import"))
    res = cli("run", "app/flows/main.py:graph", "-i", '{"topic": "pkg"}', "-t", "t", "--db", "t.db", "--json")
    assert res.code == EXIT_OK, res.err
    assert res.json()["values"]["greeting"] == "hello pkg"


def test_a_module_target_is_imported_from_the_current_folder(cli: Cli) -> None:
    res = cli("draw", "flow:graph")
    assert res.code == EXIT_OK, res.err
    assert "greet" in res.out


@pytest.mark.parametrize(
    ("files", "target", "needle"),
    [
        ({}, "nofile.py:graph", "no such file: 'nofile.py'"),
        ({}, "nomodule:graph", "no module named 'nomodule'"),
        ({"bad.py": "def broken(:\n"}, "bad.py:graph", "SyntaxError: invalid syntax (bad.py, line 1)"),
        (
            {"imp.py": "import nosuchmod\n"},
            "imp.py:graph",
            "ModuleNotFoundError: No module named 'nosuchmod' (imp.py, line 1)",
        ),
        (
            {"imp2.py": "from helpers import missing\n", "helpers.py": "x = 1\n"},
            "imp2.py:graph",
            "ImportError: cannot import name 'missing'",
        ),
        (
            {"boom.py": "raise RuntimeError('no config')\n"},
            "boom.py:graph",
            "RuntimeError: no config (boom.py, line 1)",
        ),
        ({}, "flow.py:nothing", "flow.py has no attribute 'nothing'; it defines compiled, graph, paused"),
        ({}, "flow.py:schema", "it is a StateSchema, not a Graph"),
        ({"f.py": "def make():\n    return 42\n"}, "f.py:make", "it returned an int, not a Graph"),
        (
            {"g.py": "def make():\n    raise KeyError('k')\n"},
            "g.py:make",
            "calling it raised KeyError: 'k' (g.py, line 2)",
        ),
        ({}, "flow.py", "no ':GRAPH' part"),
        ({}, "flow.py:", "no ':GRAPH' part"),
        ({"sub/x.txt": "x"}, "sub:graph", "sub has no attribute 'graph'"),
        (
            {"u.py": "from plait import Graph, StateSchema\ng = Graph(StateSchema.builder().add_lww('x').build())\n"},
            "u.py:g",
            "the graph does not compile",
        ),
    ],
)
def test_every_failure_to_load_is_one_line_and_exit_2(
    cli: Cli, files: dict[str, str], target: str, needle: str
) -> None:
    for name, text in files.items():
        cli.write(name, text)
    for command in (("run", target, "--db", "t.db"), ("draw", target)):
        res = cli(*command)
        assert res.code == EXIT_USAGE, res.err
        line = res.one_line()
        assert target in line and needle in line, line


def test_every_graph_command_reports_a_bad_target_the_same_way(cli: Cli) -> None:
    cli("run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t", "--db", "t.db")
    for args in (
        ("resume", "nofile.py:graph", "t"),
        ("update", "t", "--graph", "nofile.py:graph", "--set", "topic=y"),
        ("fork", "t", "--to", "u", "--graph", "nofile.py:graph", "--set", "topic=y"),
    ):
        res = cli(*args, "--db", "t.db")
        assert res.code == EXIT_USAGE, (args, res.err)
        assert "cannot load 'nofile.py:graph': no such file" in res.one_line()


def test_debug_shows_the_traceback_of_a_load_failure(cli: Cli) -> None:
    cli.write("boom.py", "raise RuntimeError('no config')\n")
    res = cli("draw", "boom.py:graph", "--debug")
    assert res.code == EXIT_USAGE
    assert "Traceback" in res.err and "no config" in res.err
