"""Names of a package that load on first use (PEP 562), for ``plait`` and ``plait.checkpoint``.

``import plait`` would otherwise load the engine, every backend and the tracing hooks before a
user asked for any of them: 0.3 s of a command line's start (docs/benchmarks.md, "Starting the
command line"). A package lists its exports as ``{module: names}`` and installs the two
functions this returns as its module-level ``__getattr__`` and ``__dir__``; a type checker
reads the same names from the package's ``if TYPE_CHECKING:`` imports, and
tests/cli/test_start.py holds the two lists equal.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, exports: Mapping[str, Sequence[str]], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name in ``exports`` is imported from its
    module, any other name is tried as a subpackage (``plait.checkpoint``), and what was
    loaded is kept in the package's namespace so the next access is a plain lookup."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            try:
                value: Any = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        else:
            value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public})

    return __getattr__, __dir__
