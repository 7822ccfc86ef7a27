"""How the ``plait`` commands write: JSON for scripts, rich on a terminal, plain lines
otherwise; the exit codes; and the one place stdout is kept for results.

rich is imported only inside :class:`Out`'s methods, when a terminal asks for it.

Why stdout is reserved: with ``--json`` a script parses stdout, so nothing but the command's
one JSON document may reach it. A node's own ``print()`` (or a subprocess it starts) would
otherwise land in the middle of it; :func:`reserved_stdout` points both ``sys.stdout`` and,
where stdout is a real file descriptor, descriptor 1 at stderr while the command runs, and
hands the command the real stdout to write its result to.
"""

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from plait._frozen import thaw

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Exit",
    "Out",
    "installed",
    "reserved_stdout",
    "to_json_text",
]

EXIT_OK = 0
"""The command did what it was asked (a run finished, or there was nothing to do)."""
EXIT_FAILED = 1
"""The run failed (a node raised), or the command could not be done (the store failed, the
thread is busy, a confirmation was declined)."""
EXIT_USAGE = 2
"""Wrong usage, or something named does not exist: a bad option or value, an unknown
thread, checkpoint, node, channel or MODULE:GRAPH, a --db that is no store."""
EXIT_INTERRUPTED = 3
"""The run paused and waits for input (an ``interrupt()`` or a breakpoint): ``plait resume``."""
EXIT_CTRL_C = 130
"""Stopped by Ctrl-C (SIGINT), as shells report it."""


class Exit(Exception):
    """Leave with ``code`` after the output was written."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


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


@contextlib.contextmanager
def reserved_stdout() -> Iterator[TextIO]:
    """Send everything written to stdout to stderr meanwhile, and yield the real stdout.

    Python-level writes (``print``) follow ``sys.stdout``; a subprocess or C code writes to
    descriptor 1, which is pointed at stderr too when stdout is the process's own stdout.
    """
    real = sys.stdout
    fd: int | None = None
    if real is sys.__stdout__ and real is not None:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            fd = real.fileno()
    if fd is None:
        sys.stdout = sys.stderr
        try:
            yield real
        finally:
            sys.stdout = real
        return
    real.flush()
    saved = os.dup(fd)
    os.dup2(sys.stderr.fileno(), fd)
    keep = open(saved, "w", encoding=real.encoding or "utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdout = sys.stderr
    try:
        yield keep
    finally:
        keep.flush()
        sys.stdout = real
        os.dup2(saved, fd)
        keep.close()
        os.close(saved)


@dataclass(slots=True)
class Out:
    """Where a command writes: JSON for scripts, rich on a terminal, plain lines otherwise."""

    json: bool = False
    rich: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    """The command's stdout (the real one, also while node output is sent to stderr)."""

    @classmethod
    def make(cls, as_json: bool, stream: TextIO | None = None) -> "Out":
        stream = stream if stream is not None else sys.stdout
        rich = not as_json and stream.isatty() and installed("rich")
        return cls(json=as_json, rich=rich, stream=stream)

    def _console(self) -> Any:
        from rich.console import Console

        return Console(file=self.stream, highlight=False)

    def emit(self, data: Any) -> None:
        """The command's result, as one JSON document."""
        print(to_json_text(data), file=self.stream, flush=True)

    def text(self, raw: str) -> None:
        """Raw text (a drawing, an export), written as it is."""
        self.stream.write(raw)
        self.stream.flush()

    def line(self, text: str = "") -> None:
        if self.rich:
            self._console().print(text, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.rich:
            from rich.markup import escape
            from rich.table import Table

            table = Table(title=escape(title), title_justify="left")
            for c in columns:
                table.add_column(c)
            for r in rows:  # cells are data (a memory's value, a thread id): never markup
                table.add_row(*(escape(str(x)) for x in r))
            self._console().print(table)
            return
        cells = [[str(c) for c in columns], *([str(x) for x in r] for r in rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        print(title, file=self.stream)
        for row in cells:
            print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=self.stream)
        self.stream.flush()

    def value(self, title: str, value: Any) -> None:
        if self.rich:
            from rich.markup import escape
            from rich.syntax import Syntax

            console = self._console()
            console.print(f"[bold]{escape(title)}[/bold]")
            console.print(Syntax(to_json_text(value), "json", word_wrap=True))
            return
        print(f"{title}:", file=self.stream)
        for row in to_json_text(value).splitlines():
            print(f"  {row}", file=self.stream)
        self.stream.flush()


def note(text: str) -> None:
    """A line for the operator, not for a script: on stderr, whatever the output mode."""
    print(text, file=sys.stderr, flush=True)
