"""Loading ``MODULE:GRAPH``: the object a command runs, from a file or a module.

A file target (``flows.py:graph``, ``app/flows.py:graph``) is loaded the way ``python
flows.py`` would see its code: its folder first on ``sys.path``, so that ``from helpers
import x`` finds ``helpers.py`` beside it. A file inside a package (its folder has an
``__init__.py``) is imported as part of that package, from the folder above the outermost
``__init__.py``, so its relative imports (``from .helpers import x``) work. A module target
(``app.flows:graph``) is imported with the current folder first on ``sys.path``, as
``python -m`` would.

Every way loading can fail (no such file, a syntax error, an import error inside the file, a
missing attribute, an object that is no graph, a factory that raises) is one
:class:`~plait.errors.TargetLoadError` naming the target, the reason and, for an error in the
user's code, the file and line, so that the command can say it in one line.
"""

import importlib
import importlib.util
import os
import sys
import traceback
import uuid
from types import ModuleType
from typing import TYPE_CHECKING, Any

from plait.errors import GraphError, TargetLoadError

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph

__all__ = ["compiled_of", "load_graph", "load_target"]

_USAGE = "a target is MODULE:GRAPH, e.g. flows.py:graph or app.flows:graph"


def load_target(target: str) -> Any:
    """The object ``target`` names (``MODULE:ATTR``, ATTR may be dotted).

    Raises:
        TargetLoadError: the target cannot be loaded, for any reason.
    """
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise TargetLoadError(target, f"no ':GRAPH' part; {_USAGE}")
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        module = _load_file(target, module_name)
    else:
        module = _import_module(target, module_name)
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = ".".join(attr.split(".")[:i]) or module_name
            found = _graph_names(obj) if i == 0 else []
            hint = f"; it defines {', '.join(found)}" if found else ""
            raise TargetLoadError(target, f"{where} has no attribute {part!r}{hint}") from None
    return obj


def compiled_of(obj: Any) -> Any:
    """``obj``, or the compiled graph it stands for: an object whose class has a
    ``__plait_graph__`` (an entrypoint of :mod:`plait.func`, a one-node graph) loads, serves and
    runs in a worker as that graph."""
    return obj.__plait_graph__ if hasattr(type(obj), "__plait_graph__") else obj


def load_graph(target: str) -> "CompiledGraph":
    """The graph ``target`` names, compiled (without a checkpointer, unless it is a
    CompiledGraph that has one). A function is called (with no arguments) for its graph.

    Raises:
        TargetLoadError: the target cannot be loaded, is no graph, or does not compile.
    """
    from plait.graph.builder import Dag, Graph
    from plait.graph.compiled import CompiledGraph

    obj = compiled_of(load_target(target))
    if not isinstance(obj, Graph | Dag | CompiledGraph) and callable(obj) and not isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise TargetLoadError(target, f"calling it raised {_error_at(exc)}") from exc
        kind = "returned"
    else:
        kind = "is"
    if isinstance(obj, Graph | Dag):
        try:
            return obj.compile()
        except GraphError as exc:
            raise TargetLoadError(target, f"the graph does not compile: {exc}") from exc
    if isinstance(obj, CompiledGraph):
        return obj
    raise TargetLoadError(
        target,
        f"it {kind} {_a(type(obj).__name__)}, not a Graph, Dag or CompiledGraph (or a function that returns one)",
    )


def _a(name: str) -> str:
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _load_file(target: str, file: str) -> ModuleType:
    path = os.path.abspath(file)
    if not os.path.exists(path):
        raise TargetLoadError(target, f"no such file: {file!r}")
    if os.path.isdir(path):
        raise TargetLoadError(target, f"{file!r} is a folder; name a .py file in it, or the package as a module")
    folder, base = os.path.split(path)
    stem = os.path.splitext(base)[0]
    if os.path.exists(os.path.join(folder, "__init__.py")) and stem.isidentifier():
        parts = [stem]
        root = folder
        while os.path.exists(os.path.join(root, "__init__.py")):
            root, name = os.path.split(root)
            if not name.isidentifier():
                break
            parts.insert(0, name)
        else:
            _put_first_on_path(root)
            return _import_module(target, ".".join(parts), from_file=file)
    _put_first_on_path(folder)
    # A private name, as `python flows.py` runs it as __main__ rather than as `flows`: the
    # file may share its name with a module already imported (json.py, test.py).
    name = "_plait_target_" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetLoadError(target, f"{file!r} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        if not isinstance(exc, Exception):
            raise
        raise TargetLoadError(target, f"loading {file} raised {_error_at(exc)}") from exc
    return module


def _import_module(target: str, name: str, *, from_file: str | None = None) -> ModuleType:
    if from_file is None:
        _put_first_on_path(os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            hint = " (a file is named with its .py: flows.py:graph)" if from_file is None else ""
            raise TargetLoadError(target, f"no module named {exc.name!r}{hint}") from exc
        raise TargetLoadError(target, f"importing {from_file or name} raised {_error_at(exc)}") from exc
    except Exception as exc:
        raise TargetLoadError(target, f"importing {from_file or name} raised {_error_at(exc)}") from exc


def _put_first_on_path(folder: str) -> None:
    if sys.path[:1] != [folder]:
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)


def _error_at(exc: BaseException) -> str:
    """``Type: message (file, line N)``: where in the user's code an error was raised."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError: {exc.msg} ({_short(exc.filename)}, line {exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_internal(f.filename)]
    if frames:
        last = frames[-1]
        text += f" ({_short(last.filename)}, line {last.lineno})"
    return text


def _is_internal(filename: str) -> bool:
    return filename.startswith("<frozen") or os.path.dirname(__file__) in filename or "importlib" in filename


def _short(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _graph_names(module: Any) -> list[str]:
    """The names in ``module`` that a target could name: graphs and functions defined there."""
    from plait.graph.builder import Dag, Graph
    from plait.graph.compiled import CompiledGraph

    names = []
    for key, value in sorted(vars(module).items()):
        if key.startswith("_"):
            continue
        if isinstance(compiled_of(value), Graph | Dag | CompiledGraph):
            names.append(key)
    return names
