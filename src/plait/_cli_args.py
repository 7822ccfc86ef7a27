"""Turning the ``plait`` command line's arguments into values: JSON (or ``@file``),
``--set key=json`` pairs, the ``--db`` store, and the graph named by ``MODULE:GRAPH``.

Stores opened here are closed by :func:`close_stores` when the command ends.
"""

import importlib
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plait._cli_output import UsageError
from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph

__all__ = [
    "DEFAULT_DB",
    "close_stores",
    "load_target",
    "open_store",
    "parse_json",
    "parse_sets",
    "resolve_graph",
]

DEFAULT_DB = "plait.db"

_OPEN: list[Checkpointer] = []
"""Stores opened by the running command, closed when it ends."""


def parse_json(text: str, what: str) -> Any:
    """JSON text, or ``@path`` for a file holding it."""
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"{what}: cannot read {text[1:]!r}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``key=json`` pairs; a value that is not JSON is taken as a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set takes key=json, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def open_store(db: str, *, create: bool = False) -> Checkpointer:
    """The checkpointer for ``--db``: a SQLite path or a ``postgresql://`` DSN."""
    from plait.graph.compiled import coerce_checkpointer

    if not db.startswith(("postgres://", "postgresql://")) and not create and not os.path.exists(db):
        raise UsageError(f"no database at {db!r}: pass --db PATH (a SQLite file or a postgresql:// DSN)")
    saver = coerce_checkpointer(db)
    assert saver is not None
    _OPEN.append(saver)
    run_sync(saver.asetup())
    return saver


def close_stores() -> None:
    """Close the stores :func:`open_store` opened, newest first."""
    while _OPEN:
        run_sync(_OPEN.pop().aclose())


def load_target(target: str) -> Any:
    """The object named by ``MODULE:ATTR`` (MODULE may be a ``.py`` file)."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:GRAPH (e.g. app.graphs:support or flow.py:graph), got {target!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise UsageError(f"no such file: {module_name!r}")
        name = "_plait_target_" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex[:8]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot load {module_name!r} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
    return obj


def resolve_graph(target: str, db: str | None, *, need_store: bool = True) -> "CompiledGraph":
    """Compile ``target`` on the ``--db`` store (a CompiledGraph keeps its own store when no
    --db is given)."""
    from plait.graph.builder import Dag, Graph
    from plait.graph.compiled import CompiledGraph

    obj = load_target(target)
    if not isinstance(obj, Graph | Dag | CompiledGraph) and callable(obj):
        obj = obj()
    store: Checkpointer | None = None
    if need_store and not (isinstance(obj, CompiledGraph) and obj.checkpointer is not None and db is None):
        store = open_store(db or DEFAULT_DB, create=True)
    if isinstance(obj, Graph | Dag):
        return obj.compile(checkpointer=store)
    if isinstance(obj, CompiledGraph):
        if store is None:
            return obj
        return CompiledGraph(
            obj.spec,
            checkpointer=store,
            namespace=obj.namespace,
            interrupt_before=tuple(obj.interrupt_before),
            interrupt_after=tuple(obj.interrupt_after),
            name=obj.name,
        )
    raise UsageError(f"{target!r} is a {type(obj).__name__}, not a Graph, Dag or CompiledGraph")
