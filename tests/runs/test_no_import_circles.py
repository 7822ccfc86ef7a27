"""No module of plait.runs imports, even lazily or for type checking only, one that imports
it back (directly or around a longer circle): each piece two modules share has a module of
its own below both. Read from the source, every import statement."""

from __future__ import annotations

import ast
import pathlib

import plait.runs

PACKAGE = "plait.runs"
ROOT = pathlib.Path(plait.runs.__file__).resolve().parent


def _module(path: pathlib.Path) -> str:
    return f"{PACKAGE}.{path.stem}"


def _imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The modules of the package that ``path`` imports (``from plait.runs import _store``
    names the submodule, not the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found & modules


def graph() -> dict[str, set[str]]:
    paths = [p for p in sorted(ROOT.glob("*.py")) if p.name != "__init__.py"]
    modules = {_module(p) for p in paths}
    return {_module(p): _imports(p, modules) - {_module(p)} for p in paths}


def circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``edges``, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(edges[node]):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(edges):
        found = visit(start, [])
        if found:
            return found
    return None


def test_the_runs_modules_import_one_another_without_circles() -> None:
    edges = graph()
    assert {"plait.runs.client", "plait.runs.schedules", "plait.runs._submit"} <= set(edges)
    assert "plait.runs._submit" in edges["plait.runs.schedules"]  # the walk sees imports
    assert circle(edges) is None, " -> ".join(circle(edges) or [])


def test_a_circle_is_found() -> None:
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None
