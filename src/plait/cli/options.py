"""The arguments and options several ``plait`` commands share, declared once (imports typer)."""

from typing import Annotated

import typer

from plait.cli.arguments import DEFAULT_DB

__all__ = ["Db", "Debug", "Json", "Ns", "OptDb", "Sets", "Target"]

Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]
Db = Annotated[str, typer.Option("--db", help="SQLite file or postgresql:// DSN.")]
OptDb = Annotated[str | None, typer.Option("--db", help=f"SQLite file or postgresql:// DSN [default: {DEFAULT_DB}].")]
Ns = Annotated[str, typer.Option("--namespace", help="The graph's namespace.")]
Target = Annotated[str, typer.Argument(help="MODULE:GRAPH (a module or a .py file, and a graph or factory).")]
Sets = Annotated[list[str] | None, typer.Option("--set", help="key=json (repeatable).")]
