"""Arrows point down only (ARCHITECTURE.md §7): the command line is on top and nothing imports
it; the store layer and the pure state layer import nothing above them. Read from the source
(every import statement, those inside functions too), so a lazy import cannot hide an arrow."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "plait"


def imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules_under(package: str) -> list[pathlib.Path]:
    base = SRC / package
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


# layer -> the layers above it, which it must never import
ABOVE = {
    "checkpoint": ("plait.graph", "plait.engine", "plait.cli", "plait.server", "plait.runs"),
    "state": ("plait.checkpoint", "plait.graph", "plait.engine", "plait.cli", "plait.server", "plait.runs"),
    "errors": ("plait.",),
    "graph": ("plait.cli", "plait.server", "plait.runs"),
    "inspect": ("plait.graph", "plait.engine", "plait.cli", "plait.server", "plait.runs"),
}


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    for path in modules_under(layer):
        bad = sorted(m for m in imports(path) if m.startswith(ABOVE[layer]))
        assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_nothing_but_the_entry_points_imports_the_command_line() -> None:
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "cli" or rel.name == "__main__.py":
            continue
        bad = sorted(m for m in imports(path) if m == "plait.cli" or m.startswith("plait.cli."))
        assert not bad, f"{rel} imports {bad}"


def test_typer_and_rich_are_imported_by_the_command_line_only() -> None:
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "cli":
            continue
        bad = sorted(m for m in imports(path) if m.split(".")[0] in ("typer", "rich", "click"))
        assert not bad, f"{rel} imports {bad}"
