"""The typer application: one registration function per command group.

Imported only when the command line runs (it imports typer); :func:`plait.cli.main` is the
entry point.
"""

import typer

from plait.cli import db, graphs, threads

__all__ = ["build_app"]


def build_app() -> typer.Typer:
    """The ``plait`` application, every command registered."""
    app = typer.Typer(
        name="plait",
        help="Durable, stateful graph workflows: run graphs, inspect, edit and fork their threads.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    graphs.register(app)
    threads.register(app)
    db.register(app)
    return app
