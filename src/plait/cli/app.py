"""The typer application: one registration function per command group.

Imported only when the command line runs (it imports typer); :func:`plait.cli.main` is the
entry point.

A command line names one command, and only the module that registers it is imported:
``plait threads`` does not load the graph engine, the Studio or the run queue, which is most
of what starting the command line cost (0.5 s of imports before, docs/benchmarks.md). Help,
shell completion and a command name that is not known register every module, so that the
listing and click's "did you mean" stay whole.
"""

import copy
import importlib
from collections.abc import Sequence
from typing import Annotated, Any

import typer

__all__ = ["COMMANDS", "MODULES", "build_app", "build_command", "module_for"]

# The command modules, in the order their commands are listed in help.
MODULES = ("graphs", "threads", "watch", "transfer", "db", "migrate", "store", "studio", "serve", "runs")

# Top-level command name -> the module that registers it (tests/cli/test_start.py holds this
# equal to what the modules register).
COMMANDS: dict[str, str] = {
    **dict.fromkeys(("demo", "draw", "resume", "run", "update"), "graphs"),
    **dict.fromkeys(("delete", "diff", "fork", "history", "state", "threads"), "threads"),
    "watch": "watch",
    "export": "transfer",
    "import": "transfer",
    "db": "db",
    "migrate": "migrate",
    "store": "store",
    "studio": "studio",
    "serve": "serve",
    **dict.fromkeys(("run-cancel", "runs", "schedule", "schedules", "submit", "worker"), "runs"),
}

HELP = (
    "Durable, stateful graph workflows: run graphs, and inspect, edit, fork, move and replay their threads.\n\n"
    "Exit codes: 0 done, 1 the run failed, 2 usage error or not found, 3 paused for input. "
    "The store is --db, else $PLAIT_DB, else plait.db."
)


def _version(value: bool) -> None:
    if value:
        from plait._version import __version__

        print(f"plait {__version__}")
        raise typer.Exit(0)


def module_for(args: Sequence[str]) -> str | None:
    """The one module a command line needs, or None when it needs them all (help, completion,
    no command, an unknown one)."""
    for arg in args:
        if arg.startswith("-"):
            if arg in ("--help", "-h") or arg.endswith("-completion"):
                return None
            continue
        return COMMANDS.get(arg)
    return None


def build_app(modules: Sequence[str] = MODULES) -> typer.Typer:
    """The ``plait`` application with the commands of ``modules`` (all of them by default)."""
    app = typer.Typer(
        name="plait",
        help=HELP,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["--help", "-h"]},
    )

    @app.callback()
    def root(
        version: Annotated[
            bool,
            typer.Option(
                "--version", "-V", metavar="", help="Print plait's version and exit.", callback=_version, is_eager=True
            ),
        ] = False,
    ) -> None:
        """Durable, stateful graph workflows: run graphs, and inspect, edit, fork, move and replay their threads."""

    for name in modules:
        importlib.import_module(f"plait.cli.{name}").register(app)
    return app


def build_command(args: Sequence[str] | None = None) -> Any:
    """The click command of :func:`build_app`, with its help made quiet: typer labels every
    flag ``<bool>`` and every argument ``<str>`` in help, which says nothing an operator can
    use, so flags (``--help`` and the completion options included) get an empty metavar and
    arguments no type column.

    Given the command line's ``args``, only the module its command needs is registered.
    """
    module = None if args is None else module_for(args)
    command = typer.main.get_command(build_app(MODULES if module is None else (module,)))
    _quiet(command, None)
    return command


def _quiet(command: Any, parent: Any) -> None:
    ctx = typer.Context(command, parent=parent, info_name=command.name, help_option_names=["--help", "-h"])
    params = [*command.params, command.get_help_option(ctx)]
    for param in params:
        if param is None:
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif getattr(param, "param_type_name", "") == "argument":
            # typer's rich help shows an argument's type as `<str>` unless its type names no
            # metavar; the type objects are shared, so the argument gets its own copy
            quiet_type = copy.copy(param.type)
            quiet_type.get_metavar = _no_type
            param.type = quiet_type
    for sub in getattr(command, "commands", {}).values():
        _quiet(sub, ctx)


def _no_type(*args: Any, **kwargs: Any) -> str:
    return ""
