"""The ``plait`` command line: run graphs, and inspect, edit, fork, move and replay their threads.

Inspection commands (``threads``, ``history``, ``state``, ``diff``, ``export``, ``db``) open
the store directly and need no graph: checkpoints hold their values whole. Commands that run a
graph or fold writes through its reducers (``run``, ``resume``, ``update``, ``fork --set``)
take ``MODULE:GRAPH`` (:mod:`plait.cli.loading`).

Exit codes (:mod:`plait.cli.output`): 0 done, 1 the run failed (or the command could not be
done), 2 usage error or not found, 3 paused for input, 130 Ctrl-C. An error is one line on
stderr, or one JSON object with ``--json``; ``--debug`` adds the traceback.

typer and rich are imported only when the command line runs (``pip install 'plait[cli]'``),
so ``import plait`` never loads them, and importing this package does not either: it holds
the entry point :func:`main` only. The modules:

* :mod:`plait.cli.app`: the typer application, one registration function per group, and
  :mod:`plait.cli.options`, the options the commands share;
* :mod:`plait.cli.context`: how a command runs and how its errors become exit codes;
  :mod:`plait.cli.invocation`, what a running command owns (its output, the stores it
  opened); :mod:`plait.cli.messages` says its errors in the command line's words;
* :mod:`plait.cli.arguments` (JSON, ``--set``, confirmations), :mod:`plait.cli.loading`
  (``MODULE:GRAPH``), :mod:`plait.cli.selection` (which checkpoint an id or step means, and
  how short a table may show one);
* :mod:`plait.cli.output` (JSON, rich or plain; the exit codes); the JSON shapes of threads
  and checkpoints are :mod:`plait.inspect_json`'s, the Studio's too;
* the commands: :mod:`plait.cli.graphs`, :mod:`plait.cli.threads`, :mod:`plait.cli.transfer`
  (export and import), :mod:`plait.cli.db`, :mod:`plait.cli.migrate` (a graph's threads to
  its version); and :mod:`plait.cli.demo`, the bundled demo.
"""

import signal
import sys
from collections.abc import Sequence

from plait.cli.output import EXIT_CTRL_C, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Exit, installed

# The exit codes are part of the command line's contract, so they are importable from here.
__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main"]

INSTALL_HINT = "plait: the command line needs typer and rich: pip install 'plait[cli]'"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``plait`` entry point; returns the exit code.

    The application runs with click's standalone mode off, so that its usage errors are
    written here like every other error: one line on stderr, or one JSON object with
    ``--json``, and exit code 2.
    """
    if argv is None and hasattr(signal, "SIGPIPE"):
        # `plait history T | head` ends quietly, like other command line tools
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if not (installed("typer") and installed("rich")):
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_USAGE
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):  # the eager option, answered before typer loads
        from plait._version import __version__

        print(f"plait {__version__}")
        return EXIT_OK
    from plait.cli.app import build_command

    command = build_command(args)
    try:
        rv = command.main(args=args, prog_name="plait", standalone_mode=False)
    except Exit as exc:
        return exc.code
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_FAILED)
    except KeyboardInterrupt:
        return EXIT_CTRL_C
    except Exception as exc:
        as_json = "--json" in (args[: args.index("--")] if "--" in args else args)
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int) and callable(getattr(exc, "format_message", None)):
            return _usage_error(exc, code, as_json=as_json)
        # not a command's error (those end in run_command): a failure of the command line itself
        if "--debug" in args:
            import traceback

            traceback.print_exc()
        message = f"{type(exc).__name__}: {exc} (unexpected: run again with --debug for the traceback, and report it)"
        if as_json:
            import json

            print(
                json.dumps({"error": type(exc).__name__, "message": message, "exit_code": EXIT_FAILED}), file=sys.stderr
            )
        else:
            print(f"error: {message}", file=sys.stderr)
        return EXIT_FAILED
    return rv if isinstance(rv, int) else EXIT_OK


def _usage_error(exc: Exception, code: int, *, as_json: bool) -> int:
    """Write a usage error of click (an unknown option, a missing argument) in plait's way."""
    import json

    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
        text = ctx.get_help()  # typer's rich help prints itself and returns ""
        if text:
            print(text, file=sys.stderr)
        return code
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    if ctx is not None:
        message += f" (see: {ctx.command_path} --help)"
    if as_json:
        print(json.dumps({"error": "ArgumentError", "message": message, "exit_code": code}), file=sys.stderr)
    else:
        print(f"error: {message}", file=sys.stderr)
    return code
