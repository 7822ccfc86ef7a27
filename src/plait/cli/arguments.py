"""Turning the ``plait`` command line's arguments into values: JSON (or ``@file``),
``--set key=json`` pairs, and the object named by ``MODULE:GRAPH``.

Opening the ``--db`` store and compiling the graph on it belong to the command's
:class:`~plait.cli.context.Invocation`, which closes what it opened.
"""

import importlib
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from plait.cli.output import UsageError

__all__ = ["DEFAULT_DB", "load_target", "parse_json", "parse_sets"]

DEFAULT_DB = "plait.db"


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
