"""The typer application: one registration function per command group.

Imported only when the command line runs (it imports typer); :func:`plait.cli.main` is the
entry point.
"""

from typing import Annotated, Any

import typer

from plait.cli import db, graphs, migrate, runs, serve, store, studio, threads, transfer, watch

__all__ = ["build_app", "build_command"]

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


def build_app() -> typer.Typer:
    """The ``plait`` application, every command registered."""
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

    graphs.register(app)
    threads.register(app)
    watch.register(app)
    transfer.register(app)
    db.register(app)
    migrate.register(app)
    store.register(app)
    studio.register(app)
    serve.register(app)
    runs.register(app)
    return app


def build_command() -> Any:
    """The click command of :func:`build_app`, with its help made quiet: typer labels every
    flag ``<bool>`` and every argument ``<str>`` in help, which says nothing an operator can
    use, so flags (``--help`` and the completion options included) get an empty metavar and
    arguments no type column."""
    command = typer.main.get_command(build_app())
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
            param.display_type_rich = _no_type
    for sub in getattr(command, "commands", {}).values():
        _quiet(sub, ctx)


def _no_type(ctx: Any = None) -> None:
    return None
