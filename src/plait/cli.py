"""The ``plait`` command line: run graphs, and inspect, edit and fork their threads.

Inspection commands (``threads``, ``history``, ``state``, ``diff``, ``db``) open the store
directly and need no graph: checkpoints hold their values whole. Commands that run a graph
or fold writes through its reducers (``run``, ``resume``, ``update``, ``fork --set``) take
``MODULE:GRAPH``, where MODULE is a module name or a ``.py`` file and GRAPH names a
``Graph``, ``Dag`` or ``CompiledGraph``, or a function with no arguments that returns one.

Exit codes: 0 done, 1 the run or the command failed, 2 wrong usage, 3 the run paused and
waits for input (``plait resume``). Errors are one line; ``--debug`` shows the traceback.

typer and rich are imported only when the command line runs (``pip install 'plait[cli]'``),
so ``import plait`` never loads them. This module holds the entry point :func:`main` and
the typer application (:func:`build_app`); the commands' work is done by plain functions in
private modules: :mod:`plait._cli_output` (rendering, errors, exit codes),
:mod:`plait._cli_args` (arguments, the ``--db`` store, ``MODULE:GRAPH``),
:mod:`plait._cli_threads` (commands on a store's threads) and :mod:`plait._cli_graph`
(commands that load a graph).
"""

import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, NoReturn

from plait._cli_args import DEFAULT_DB, close_stores, open_store, parse_json, parse_sets, resolve_graph
from plait._cli_graph import cmd_demo, cmd_draw, cmd_run, cmd_update
from plait._cli_output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Exit, Out, UsageError, fail, installed
from plait._cli_threads import cmd_db_prune, cmd_db_stats, cmd_diff, cmd_fork, cmd_history, cmd_state, cmd_threads
from plait.errors import PlaitError

if TYPE_CHECKING:
    import typer

# The exit codes are part of the command line's contract, so they are importable from here.
__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_app", "main"]

INSTALL_HINT = "plait: the command line needs typer and rich: pip install 'plait[cli]'"


def guarded(debug: bool, fn: Callable[[], None]) -> None:
    """Run a command body, turning errors into one line and an exit code."""
    try:
        try:
            fn()
        finally:
            close_stores()
    except Exit:
        raise
    except UsageError as exc:
        if debug:
            traceback.print_exc()
        fail(str(exc), EXIT_USAGE)
    except PlaitError as exc:
        if debug:
            traceback.print_exc()
        fail(f"{type(exc).__name__}: {exc}", EXIT_FAILED)
    except (OSError, ValueError, TypeError, RuntimeError) as exc:
        if debug:
            traceback.print_exc()
        fail(f"{type(exc).__name__}: {exc}", EXIT_FAILED)


# -- the typer application -------------------------------------------------------------------


def build_app() -> "typer.Typer":
    """The typer application (imports typer)."""
    import typer

    app = typer.Typer(
        name="plait",
        help="Durable, stateful graph workflows: run graphs, inspect, edit and fork their threads.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    db_app = typer.Typer(help="Look after the store: migrate, prune, stats.", no_args_is_help=True)
    app.add_typer(db_app, name="db")

    Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
    Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]
    Db = Annotated[str, typer.Option("--db", help="SQLite file or postgresql:// DSN.")]
    OptDb = Annotated[
        str | None, typer.Option("--db", help=f"SQLite file or postgresql:// DSN [default: {DEFAULT_DB}].")
    ]
    Ns = Annotated[str, typer.Option("--namespace", help="The graph's namespace.")]
    Target = Annotated[str, typer.Argument(help="MODULE:GRAPH (a module or a .py file, and a graph or factory).")]
    Sets = Annotated[list[str] | None, typer.Option("--set", help="key=json (repeatable).")]

    @app.command()
    def demo(
        db: Annotated[str, typer.Option("--db", help="Where the demo keeps its SQLite file.")] = "plait-demo.db",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run the bundled demo: fan-out, an interrupt, a crash in a child process, the resume, a fork."""
        guarded(debug, lambda: cmd_demo(db, Out.make(as_json)))

    @app.command()
    def run(
        target: Target,
        input: Annotated[str, typer.Option("--input", "-i", help="JSON input, or @file.")] = "{}",
        thread: Annotated[str | None, typer.Option("--thread", "-t", help="Thread id (new if not given).")] = None,
        db: OptDb = None,
        durability: Annotated[str, typer.Option(help="sync, async or exit.")] = "sync",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run a graph on a thread (exit 3 when it pauses for input)."""
        guarded(debug, lambda: cmd_run(target, parse_json(input, "--input"), thread, db, Out.make(as_json), durability))

    @app.command()
    def resume(
        target: Target,
        thread: Annotated[str, typer.Argument(help="The thread to continue.")],
        resume_value: Annotated[
            str | None, typer.Option("--resume", "-r", help="JSON answer to the pending interrupt, or @file.")
        ] = None,
        db: OptDb = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Continue a thread: after a pause, a failure or a crash; --resume answers an interrupt."""

        def body() -> None:
            from plait.types import Command

            value = None if resume_value is None else Command(resume=parse_json(resume_value, "--resume"))
            cmd_run(target, value, thread, db, Out.make(as_json), "sync")

        guarded(debug, body)

    @app.command()
    def threads(
        db: Db = DEFAULT_DB,
        namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace.")] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List the threads in a store, newest first."""
        guarded(debug, lambda: cmd_threads(open_store(db), namespace, Out.make(as_json)))

    @app.command()
    def history(
        thread: str,
        limit: Annotated[int | None, typer.Option("--limit", "-n", help="At most N checkpoints.")] = None,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """A thread's checkpoints, newest first."""
        guarded(debug, lambda: cmd_history(open_store(db), thread, limit, namespace, Out.make(as_json)))

    @app.command()
    def state(
        thread: str,
        checkpoint: Annotated[str | None, typer.Option("--checkpoint", "-c", help="A checkpoint id.")] = None,
        key: Annotated[str | None, typer.Option("--key", "-k", help="Only this channel.")] = None,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """A thread's state (the latest, or at --checkpoint)."""
        guarded(debug, lambda: cmd_state(open_store(db), thread, checkpoint, key, namespace, Out.make(as_json)))

    @app.command("diff")
    def diff_cmd(
        a: str,
        b: str,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Where two threads part ways, and how their heads differ."""
        guarded(debug, lambda: cmd_diff(open_store(db), a, b, namespace, Out.make(as_json)))

    @app.command()
    def fork(
        thread: str,
        to: Annotated[str, typer.Option("--to", help="The new thread.")],
        checkpoint: Annotated[str | None, typer.Option("--checkpoint", "-c", help="Fork here (default: head).")] = None,
        set_: Sets = None,
        graph: Annotated[str | None, typer.Option("--graph", help="MODULE:GRAPH, needed with --set.")] = None,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Copy a checkpoint into a new thread, optionally with edits folded through the reducers."""
        guarded(
            debug,
            lambda: cmd_fork(
                open_store(db), thread, checkpoint, to, parse_sets(set_ or []), graph, db, namespace, Out.make(as_json)
            ),
        )

    @app.command()
    def update(
        thread: str,
        graph: Annotated[str, typer.Option("--graph", help="MODULE:GRAPH (its reducers fold the update).")],
        set_: Sets = None,
        as_node: Annotated[str | None, typer.Option("--as-node", help="Write as this node.")] = None,
        db: Db = DEFAULT_DB,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Write to a thread's state through the reducers, as a new checkpoint."""

        def body() -> None:
            open_store(db)  # refuse a missing file before loading the graph
            cmd_update(resolve_graph(graph, db), thread, parse_sets(set_ or []), as_node, Out.make(as_json))

        guarded(debug, body)

    @app.command()
    def draw(
        target: Target,
        fmt: Annotated[str, typer.Option("--format", "-f", help="mermaid, ascii or svg.")] = "mermaid",
        output: Annotated[str | None, typer.Option("--output", "-o", help="Write to this file.")] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Draw a graph: Mermaid text, ASCII or SVG (no network)."""
        guarded(debug, lambda: cmd_draw(target, fmt, output, Out.make(as_json)))

    @db_app.command("migrate")
    def db_migrate(db: Db = DEFAULT_DB, as_json: Json = False, debug: Debug = False) -> None:
        """Create the store, or bring its schema up to date."""

        def body() -> None:
            open_store(db, create=True)
            out = Out.make(as_json)
            if out.json:
                out.emit({"store": db, "migrated": True})
            else:
                out.line(f"{db}: up to date")

        guarded(debug, body)

    @db_app.command("prune")
    def db_prune(
        keep_last: Annotated[int, typer.Option("--keep-last", help="Checkpoints to keep per branch.")],
        thread: Annotated[str | None, typer.Option("--thread", help="Only this thread.")] = None,
        namespace: Annotated[str | None, typer.Option("--namespace")] = None,
        db: Db = DEFAULT_DB,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Drop old checkpoints (never one a live branch or a delta needs)."""
        guarded(debug, lambda: cmd_db_prune(open_store(db), thread, keep_last, namespace, Out.make(as_json)))

    @db_app.command("stats")
    def db_stats(db: Db = DEFAULT_DB, as_json: Json = False, debug: Debug = False) -> None:
        """How many threads and checkpoints a store holds."""
        guarded(debug, lambda: cmd_db_stats(open_store(db), db, Out.make(as_json)))

    return app


def main(argv: Sequence[str] | None = None) -> int:
    """The ``plait`` entry point; returns the exit code."""
    if argv is None and hasattr(signal, "SIGPIPE"):
        # `plait history T | head` ends quietly, like other command line tools
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if not (installed("typer") and installed("rich")):
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_USAGE
    app = build_app()
    try:
        app(args=list(argv) if argv is not None else None, prog_name="plait")
    except Exit as exc:
        return exc.code
    except SystemExit as exc:  # how click ends: usage errors are 2, --help is 0
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_FAILED)
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


def _entry() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
