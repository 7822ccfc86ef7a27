"""The ``plait`` command line: run graphs, and inspect, edit and fork their threads.

Inspection commands (``threads``, ``history``, ``state``, ``diff``, ``db``) open the store
directly and need no graph: checkpoints hold their values whole. Commands that run a graph
or fold writes through its reducers (``run``, ``resume``, ``update``, ``fork --set``) take
``MODULE:GRAPH``, where MODULE is a module name or a ``.py`` file and GRAPH names a
``Graph``, ``Dag`` or ``CompiledGraph``, or a function with no arguments that returns one.

Exit codes: 0 done, 1 the run or the command failed, 2 wrong usage, 3 the run paused and
waits for input (``plait resume``). Errors are one line; ``--debug`` shows the traceback.

typer and rich are imported only when the command line runs (``pip install 'plait[cli]'``),
so ``import plait`` never loads them, and importing this package does not either: it holds
the entry point :func:`main` only. The modules:

* :mod:`plait.cli.app`: the typer application, one registration function per group;
* :mod:`plait.cli.context`: what a running command owns (its output, the stores it opened)
  and how its errors become exit codes;
* :mod:`plait.cli.arguments`: arguments into values (JSON, ``--set``, ``MODULE:GRAPH``);
* :mod:`plait.cli.output`: JSON, rich or plain output, and the exit codes;
* :mod:`plait.cli.graphs`, :mod:`plait.cli.threads`, :mod:`plait.cli.db`: the commands;
* :mod:`plait.cli.demo`: the bundled demo.
"""

import signal
import sys
from collections.abc import Sequence

from plait.cli.output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Exit, installed

# The exit codes are part of the command line's contract, so they are importable from here.
__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main"]

INSTALL_HINT = "plait: the command line needs typer and rich: pip install 'plait[cli]'"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``plait`` entry point; returns the exit code."""
    if argv is None and hasattr(signal, "SIGPIPE"):
        # `plait history T | head` ends quietly, like other command line tools
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if not (installed("typer") and installed("rich")):
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_USAGE
    from plait.cli.app import build_app

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
