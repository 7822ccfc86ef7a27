"""The arguments and options several ``plait`` commands share, declared once (imports typer).

Flags get an empty metavar, so that help shows ``--json`` rather than ``--json <bool>``, and
values a word saying what they are (``--db STORE``, ``--limit N``). No help text holds square
brackets: typer renders help as rich markup, which would swallow them.
"""

from typing import Annotated

import typer

__all__ = [
    "AllowHost",
    "Checkpoint",
    "ConfigFile",
    "Db",
    "Debug",
    "Json",
    "Namespace",
    "OptNamespace",
    "Otel",
    "Port",
    "RecursionLimit",
    "RetentionSweep",
    "RunContext",
    "Sets",
    "Step",
    "Target",
    "Thread",
    "Yes",
]

DB_HELP = (
    "The store: a SQLite file (plait.db, sqlite:///path.db), a postgresql:// DSN, file:///folder or memory:. "
    "Default: $PLAIT_DB if set, else plait.db."
)

Json = Annotated[
    bool, typer.Option("--json", metavar="", help="Print JSON for scripts; errors too, as JSON on stderr.")
]
Debug = Annotated[bool, typer.Option("--debug", metavar="", help="Show the traceback of an error.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", metavar="", help="Do it without asking for confirmation.")]
Db = Annotated[str | None, typer.Option("--db", metavar="STORE", help=DB_HELP, show_default=False)]
Otel = Annotated[
    bool,
    typer.Option(
        "--otel",
        metavar="",
        help="Send the runs' traces over OTLP/HTTP, to where the OTEL_* environment variables say "
        "(default http://localhost:4318); needs the otel-export extra.",
    ),
]
RetentionSweep = Annotated[
    float,
    typer.Option(
        "--retention-sweep",
        metavar="S",
        help="Seconds between sweeps by the retention policy (plait db retention, and threads' own); 0: none.",
    ),
]
Port = Annotated[int, typer.Option("--port", "-p", metavar="PORT", help="The TCP port.")]
AllowHost = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host", metavar="NAME", help="Another Host name it answers to, as a proxy names it (repeatable)."
    ),
]
ConfigFile = Annotated[
    str | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="A langgraph.json: its graphs (paths relative to it) and its env (a .env file or an object), "
        "set where the environment does not set them already.",
        show_default=False,
    ),
]
Namespace = Annotated[
    str,
    typer.Option(
        "--namespace", metavar="NS", help="The namespace the thread is in (default: the empty one).", show_default=False
    ),
]
OptNamespace = Annotated[
    str | None,
    typer.Option("--namespace", metavar="NS", help="Run in this namespace instead of the graph's own."),
]
Target = Annotated[
    str,
    typer.Argument(
        metavar="MODULE:GRAPH",
        help="A .py file or module, and a Graph, Dag, CompiledGraph or a function returning one: flows.py:graph.",
        show_default=False,
    ),
]
Thread = Annotated[str, typer.Argument(metavar="THREAD", help="The thread id.", show_default=False)]
Checkpoint = Annotated[
    str | None,
    typer.Option(
        "--checkpoint", "-c", metavar="ID", help="A checkpoint id, or any unique prefix of one (default: the head)."
    ),
]
Step = Annotated[int | None, typer.Option("--step", metavar="N", help="The checkpoint at step N, instead of an id.")]
Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="A write: key=value for a string, key:=json for any JSON value (repeatable).",
    ),
]
RecursionLimit = Annotated[
    int, typer.Option("--recursion-limit", metavar="N", help="The most super-steps the run may take.")
]
RunContext = Annotated[
    str | None,
    typer.Option(
        "--context",
        metavar="JSON",
        help="Per-run values for the nodes (ctx.context): a JSON object, or @file; never stored.",
    ),
]
