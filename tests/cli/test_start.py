"""Starting the command line loads what its command needs, and ``import plait`` loads nothing.

Measured in a fresh interpreter each time: what a process has imported is the cost an
operator pays on every command (docs/benchmarks.md, "Starting the command line").
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import plait
from plait.cli.app import COMMANDS, MODULES, build_app, module_for

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str, cwd: Path) -> set[str]:
    """The ``plait`` modules a fresh interpreter holds after running ``code``."""
    listing = "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('plait', 'typer', 'pydantic')))))"
    probe = f"{code}\nimport sys, json\n{listing}"
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_command_table_is_what_the_modules_register() -> None:
    registered: dict[str, str] = {}
    for name in MODULES:
        app = typer.Typer()
        importlib.import_module(f"plait.cli.{name}").register(app)
        group = typer.main.get_command(build_app((name,)))
        assert app is not None
        for command in group.commands:  # type: ignore[attr-defined]
            registered[command] = name
    assert registered == COMMANDS


@pytest.mark.parametrize(
    ("args", "module"),
    [
        (["threads"], "threads"),
        (["--db", "x.db", "history", "t"], None),  # an option's value before the command: all
        (["db", "stats"], "db"),
        (["run-cancel", "r"], "runs"),
        (["--help"], None),
        (["threads", "--help"], "threads"),  # its help needs its module only
        (["--install-completion"], None),
        (["thread"], None),  # a typo: every command, so click can say what was meant
        ([], None),
    ],
)
def test_a_command_line_names_its_module(args: list[str], module: str | None) -> None:
    assert module_for(args) == module


def test_import_plait_loads_no_engine_and_no_backend(tmp_path: Path) -> None:
    loaded = _modules_after("import plait", tmp_path)
    assert not {"plait.graph", "plait.checkpoint", "plait.engine.loop", "plait.checkpoint.postgres"} & loaded
    assert "plait.errors" not in loaded


def test_a_graph_loads_no_postgres_and_no_file_store(tmp_path: Path) -> None:
    loaded = _modules_after("from plait import Graph, SqliteCheckpointer", tmp_path)
    assert "plait.graph.builder" in loaded and "plait.checkpoint.sqlite" in loaded
    assert not {"plait.checkpoint.postgres", "plait.checkpoint.file", "plait.runs", "plait.server"} & loaded


def test_a_typed_dict_graph_never_loads_pydantic(tmp_path: Path) -> None:
    code = (
        "from typing import TypedDict\nfrom plait import START, Graph\n"
        "class S(TypedDict):\n    x: int\n"
        "g = Graph(S)\ng.add_node('a', lambda s: {'x': s['x'] + 1})\ng.add_edge(START, 'a')\n"
        "assert g.compile().invoke({'x': 1}) == {'x': 2}"
    )
    assert not {m for m in _modules_after(code, tmp_path) if m.startswith("pydantic")}


def test_version_loads_no_typer(tmp_path: Path) -> None:
    loaded = _modules_after("from plait.cli import main\nmain(['--version'])", tmp_path)
    assert not {m for m in loaded if m.startswith("typer")}
    assert not {"plait.checkpoint", "plait.graph"} & loaded


def test_threads_loads_neither_the_engine_nor_the_other_commands(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    plait.SqliteCheckpointer(db).close()
    loaded = _modules_after(f"from plait.cli import main\nassert main(['threads', '--db', {str(db)!r}]) == 0", tmp_path)
    assert "plait.cli.threads" in loaded
    assert not {"plait.cli.studio", "plait.cli.runs", "plait.cli.graphs", "plait.engine.loop", "plait.runs"} & loaded


def test_the_lazy_names_are_the_typed_names_and_all_resolve() -> None:
    for package in (plait, importlib.import_module("plait.checkpoint")):
        path = Path(package.__file__ or "")
        tree = ast.parse(path.read_text())
        guarded = next(n for n in tree.body if isinstance(n, ast.If))  # `if TYPE_CHECKING:`
        typed = {
            (node.module, alias.asname or alias.name)
            for node in guarded.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        exports = {(module, name) for module, names in package._EXPORTS.items() for name in names}
        assert typed == exports, path
        assert sorted(name for _, name in exports) == sorted(package.__all__)
        for module, name in exports:
            assert getattr(package, name) is getattr(importlib.import_module(str(module)), name)


def test_a_subpackage_is_an_attribute_and_an_unknown_name_is_an_attribute_error() -> None:
    assert plait.checkpoint.open is importlib.import_module("plait.checkpoint.address").open
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = plait.nope
