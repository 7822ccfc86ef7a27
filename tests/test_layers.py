"""Arrows point down only (ARCHITECTURE.md §7): the command line is on top and nothing imports
it; the store layer and the pure state layer import nothing above them. Read from the source
(every import statement, those inside functions too), so a lazy import cannot hide an arrow."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

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
    if base.is_dir():
        return sorted(base.rglob("*.py"))
    return [base.with_suffix(".py")] if base.with_suffix(".py").exists() else []


# layer -> the layers above it, which it must never import. The arrows (ARCHITECTURE.md §7):
# cli, server, runs -> graph -> inspect, engine -> checkpoint, state -> types, _codec, errors.
_TOP = ("plait.cli", "plait.server", "plait.runs", "plait.serve")
ABOVE = {
    "errors": ("plait.",),
    "types": ("plait.state", "plait.checkpoint", "plait.engine", "plait.inspect", "plait.graph", *_TOP),
    "_codec": ("plait.state", "plait.checkpoint", "plait.engine", "plait.inspect", "plait.graph", *_TOP),
    "store": ("plait.state", "plait.checkpoint", "plait.engine", "plait.inspect", "plait.graph", *_TOP),
    "state": ("plait.checkpoint", "plait.engine", "plait.inspect", "plait.graph", *_TOP),
    "checkpoint": ("plait.engine", "plait.inspect", "plait.graph", *_TOP),
    "engine": ("plait.inspect", "plait.graph", *_TOP),
    "tracing": ("plait.state", "plait.checkpoint", "plait.engine", "plait.inspect", "plait.graph", *_TOP),
    "inspect": ("plait.engine", "plait.graph", *_TOP),
    "inspect_json": ("plait.engine", "plait.graph", *_TOP),
    "graph": _TOP,
    "stream_wire": ("plait.graph", *_TOP),
    "runs": ("plait.cli", "plait.server", "plait.serve."),
    "server": ("plait.cli", "plait.serve."),  # with its dot: plait.server starts with plait.serve
    "serve": ("plait.cli",),
}


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    for path in modules_under(layer):
        bad = sorted(m for m in imports(path) if m.startswith(ABOVE[layer]) and not m.startswith(f"plait.{layer}."))
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


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    """An import that works only after another module was imported (a cycle hidden by the
    order in ``plait/__init__.py``) fails here: each module is imported first, by a clean
    child of one interpreter (forked before anything of plait was imported), with an empty
    ``plait`` package in place of the public API, so that nothing it needs was loaded by
    ``plait/__init__.py`` first."""
    names = sorted(
        ".".join(("plait", *p.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        for p in SRC.rglob("*.py")
        if p.name != "__main__.py" and p.parent != SRC or p.name not in ("__init__.py", "__main__.py")
    )
    script = textwrap.dedent(
        """
        import importlib, os, sys, traceback, types
        src, names = sys.argv[1], sys.argv[2:]
        # Third-party and standard modules are loaded once, before the forks: what is checked
        # is the order of plait's own imports, and each child then pays only for those.
        for dep in ("asyncio", "sqlite3", "concurrent.futures", "inspect", "dataclasses", "orjson", "typer",
                    "rich.console", "rich.table", "psycopg", "psycopg_pool", "fastapi", "starlette", "uvicorn",
                    "jinja2", "procrastinate", "hypothesis"):
            try:
                importlib.import_module(dep)
            except ImportError:
                pass
        failed, running = [], {}

        def reap():
            pid, status = os.wait()
            if status != 0:
                failed.append(running[pid])
            del running[pid]

        for name in names:
            if len(running) >= 4:  # a few children at a time: the cores are used, not waited on
                reap()
            pid = os.fork()
            if pid == 0:
                try:
                    root = types.ModuleType("plait")
                    root.__path__ = [src]
                    sys.modules["plait"] = root
                    importlib.import_module(name)
                except BaseException:
                    traceback.print_exc()
                    os._exit(1)
                os._exit(0)
            running[pid] = name
        while running:
            reap()
        print(" ".join(failed))
        sys.exit(1 if failed else 0)
        """
    )
    done = subprocess.run([sys.executable, "-c", script, str(SRC), *names], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"modules that fail as the first import: {done.stdout}\n{done.stderr[-3000:]}"
    assert len(names) > 60, names  # the walk found the package


def test_no_module_is_over_the_size_budget() -> None:
    """Small modules with one job each: a module past 600 lines is doing two jobs."""
    big = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    big = {k: v for k, v in big.items() if k not in _BEING_SPLIT}
    assert not big, f"modules over 600 lines: {big}"


_BEING_SPLIT: set[str] = set()
"""The modules being split in the house issue (17); this set only shrinks."""


def test_every_test_folder_is_a_package() -> None:
    """pytest imports a test file by its dotted name (``tests.cli.test_json``) only while every
    folder above it has an ``__init__.py``; in a folder without one it falls back to the bare
    name, where a second ``test_schema.py`` stops the collection of the first, and the
    folder's ``from ._helpers import ...`` fails. mypy names the modules the same way."""
    tests = SRC.parent.parent / "tests"
    bare = sorted(
        str(d.relative_to(tests)) or "."
        for d in [tests, *tests.rglob("*")]
        if d.is_dir() and any(d.glob("*.py")) and not (d / "__init__.py").exists()
    )
    assert not bare, f"test folders without an __init__.py: {bare}"


def test_no_two_test_files_share_a_name() -> None:
    """A test file's name means one file, in ``-k``, in tracebacks and for the subprocesses that
    import a test module by its bare name from its folder (test_state_properties.py does)."""
    seen: dict[str, str] = {}
    tests = SRC.parent.parent / "tests"
    for path in sorted(tests.rglob("test_*.py")):
        other = seen.setdefault(path.name, str(path.relative_to(tests)))
        assert other == str(path.relative_to(tests)), f"{other} and {path.relative_to(tests)} share a name"


# -- import circles --------------------------------------------------------------------------


def _module_name(path: pathlib.Path) -> str:
    return ".".join(("plait", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(path: pathlib.Path, modules: set[str], *, type_only: bool) -> set[str]:
    """The modules of plait that ``path`` imports, at module level or inside a function: ``from
    x import y`` naming a submodule ``y`` imports ``x.y``, else ``x``; a relative import is
    resolved against the file's package. Imports under ``if TYPE_CHECKING:`` count only with
    ``type_only`` (they do not run)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in modules and m != name}


def _import_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    names = set(paths)
    return {name: _imported(path, names, type_only=type_only) for name, path in paths.items()}


def _circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: a deep chain of imports does not reach the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.add(frozenset(component))
    return found


def _package(module: str) -> str:
    """A module's package: ``plait.graph`` for ``plait.graph.compiled`` and for ``plait.graph``."""
    return module if (SRC / module.removeprefix("plait.").replace(".", "/")).is_dir() else module.rpartition(".")[0]


def _shown(circle: frozenset[str]) -> str:
    return " <-> ".join(sorted(circle))


def test_no_two_modules_import_each_other_even_lazily() -> None:
    """Arrows point one way inside a package too (ARCHITECTURE.md §7): no strongly connected
    component among the runtime imports (those inside functions included), so a module never
    depends on the import order of another; shared code lives in a module below its users."""
    circles = _circles(_import_graph())
    crossing = sorted(_shown(c) for c in circles if len({_package(m) for m in c}) > 1)
    assert not crossing, f"circles across packages: {crossing}"
    assert not circles, f"import circles: {sorted(_shown(c) for c in circles)}"


@pytest.mark.parametrize(
    "package", ["plait.cli", "plait.server", "plait.serve", "plait.runs", "plait.graph", "plait.engine"]
)
def test_no_circle_even_through_type_only_imports(package: str) -> None:
    """The command line and the Studio have no circle even among the imports made only for
    the type checker: a type two modules both need lives in a module below both."""
    graph = _import_graph(type_only=True)

    def within(m: str) -> bool:
        return m == package or m.startswith(f"{package}.")

    inside = {m: {n for n in e if within(n)} for m, e in graph.items() if within(m)}
    circles = sorted(_shown(c) for c in _circles(inside))
    assert not circles, f"circles in {package} (type-only imports counted): {circles}"


def test_the_circle_finder_sees_lazy_relative_and_submodule_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(graph) == {frozenset({"a", "b", "c"})}
    names = {"plait.server", "plait.server.app", "plait.server.api", "plait.inspect", "plait"}
    source = SRC / "server" / "api.py"
    found = _imported(source, names | {_module_name(source)}, type_only=False)
    assert "plait.inspect" in found  # from plait import inspect: the submodule


def test_the_studio_routers_never_import_the_app() -> None:
    """``server/app.py`` is the composition root: it imports the routers and the shared kernel
    (``server/studio.py``, ``server/http.py``); only the package (``plait.server``, what
    ``plait studio`` imports) imports it, as Starlette's ``routing.py`` never imports
    ``applications.py``."""
    graph = _import_graph()
    importers = sorted(m for m, imported in graph.items() if "plait.server.app" in imported)
    assert importers == ["plait.server"], importers


def _private_names_defined(tree: ast.Module) -> set[str]:
    """The ``_names`` a module defines: its functions, classes and their attributes (set on
    ``self``, declared in a class body, or a method), module globals."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    return {n for n in found if n.startswith("_")}


_OUTSIDE_PLAIT = {"os._exit"}
"""Private names of the standard library that plait means to use (a child's hard exit)."""


def test_no_module_reads_another_modules_private_names() -> None:
    """A ``_name`` is its module's own: no module imports one from another module (a private
    module of a package is fine to import, its names are not) or reads one off an object that
    another module made (``checkpointer._pool``). Read from the source: an attribute counts as
    this module's when the module defines a name so spelled."""
    bad = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _private_names_defined(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("plait"):
                for alias in node.names:
                    name = alias.name
                    module_file = SRC.joinpath(*node.module.split(".")[1:], name)
                    is_module = module_file.with_suffix(".py").exists() or module_file.is_dir()
                    if name.startswith("_") and not name.startswith("__") and not is_module:
                        bad.append(f"{rel}: from {node.module} import {name}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue
                if node.attr in own or ast.unparse(node) in _OUTSIDE_PLAIT:
                    continue
                bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "private names read from another module:\n" + "\n".join(sorted(bad))


_BACKENDS: tuple[str, ...] = ("plait.checkpoint.memory", "plait.checkpoint.file", "plait.checkpoint.sql")
_BACKENDS += ("plait.checkpoint.sqlite", "plait.checkpoint.postgres")


@pytest.mark.parametrize(
    "layer", ["server", "serve", "runs", "graph", "cli", "engine", "inspect", "inspect_json", "stream_wire"]
)
def test_floors_above_the_checkpointers_name_no_backend(layer: str) -> None:
    """What a floor above ``checkpoint/`` needs of a store is on the protocol (capabilities,
    the change feed, ``address``, ``disk_bytes``), or it opens one by address
    (``plait.checkpoint.address``): it never imports a backend's module nor names its class."""
    for path in modules_under(layer):
        rel = path.relative_to(SRC)
        bad = sorted(m for m in imports(path) if m == "plait.checkpoint" or m.startswith(_BACKENDS))
        assert not bad, f"{rel} imports {bad}"
        text = path.read_text(encoding="utf-8")
        named = [
            n
            for n in ("MemoryCheckpointer", "FileCheckpointer", "SqliteCheckpointer", "PostgresCheckpointer")
            if n in text
        ]
        assert not named, f"{rel} names {named}"
