"""How the ``plait`` commands write: JSON for scripts, rich on a terminal, plain lines
otherwise; one-line errors and the exit codes.

rich is imported only inside :class:`Out`'s methods, when a terminal asks for it.
"""

import importlib.util
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from plait._frozen import thaw

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Exit",
    "Out",
    "UsageError",
    "fail",
    "installed",
    "to_json_text",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 3


class UsageError(Exception):
    """Wrong arguments: exit code 2."""


class Exit(Exception):
    """Leave with ``code`` after the output was written."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Write ``error: message`` as one line on stderr and leave with ``code``."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise Exit(code)


def installed(name: str) -> bool:
    """Whether ``name`` can be imported (a ``None`` in ``sys.modules`` blocks it)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def to_json_text(value: Any, *, indent: bool = True) -> str:
    return json.dumps(thaw(value), indent=2 if indent else None, ensure_ascii=False, default=str)


@dataclass(slots=True)
class Out:
    """Where a command writes: JSON for scripts, rich on a terminal, plain lines otherwise."""

    json: bool = False
    rich: bool = False

    @classmethod
    def make(cls, as_json: bool) -> "Out":
        rich = not as_json and sys.stdout.isatty() and installed("rich")
        return cls(json=as_json, rich=rich)

    def emit(self, data: Any) -> None:
        print(to_json_text(data), flush=True)

    def line(self, text: str = "") -> None:
        if self.rich:
            from rich.console import Console

            Console(highlight=False).print(text, markup=False)
        else:
            print(text, flush=True)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.rich:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for c in columns:
                table.add_column(c)
            for r in rows:
                table.add_row(*(str(x) for x in r))
            Console().print(table)
            return
        cells = [[str(c) for c in columns], *([str(x) for x in r] for r in rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        print(title)
        for row in cells:
            print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())

    def value(self, title: str, value: Any) -> None:
        if self.rich:
            from rich.console import Console
            from rich.syntax import Syntax

            Console().print(f"[bold]{title}[/bold]")
            Console().print(Syntax(to_json_text(value), "json", word_wrap=True))
            return
        print(f"{title}:")
        for row in to_json_text(value).splitlines():
            print(f"  {row}")
