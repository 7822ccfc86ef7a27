"""What one running command owns: where it writes, the stores it opened, and how it ends.

Every command body runs inside :func:`run_command`, which builds its :class:`Invocation`,
closes every store the body opened through it when the body ends (whatever way it ends), and
turns errors into one line on stderr (one JSON object with ``--json``) and an exit code.
Nothing is kept at module level, so two commands run in one process (the tests do) never
share or leak a store.

Exit codes are decided here, by what went wrong and when (see :func:`exit_code`): an unknown
node or channel named on the command line is a usage error (2), the same error raised by a
node while the graph runs is the run failing (1).
"""

import logging
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from plait.checkpoint.address import redact
from plait.cli.invocation import DB_ENV, DEFAULT_DB, Invocation
from plait.cli.messages import describe
from plait.cli.output import EXIT_CTRL_C, EXIT_FAILED, EXIT_USAGE, Exit, Out, reserved_stdout, to_json_text
from plait.errors import (
    AmbiguousCheckpointError,
    CheckpointNotFoundError,
    CommandLineError,
    GraphChangedError,
    GraphError,
    InvalidMemoryError,
    InvalidNamespaceError,
    InvalidResumeError,
    MemoryFilterError,
    NotConfirmedError,
    RunNotFoundError,
    ScheduleNotFoundError,
    ServeConfigError,
    StateError,
    StoreAddressError,
    StoreUnsupportedError,
    ThreadExistsError,
    TraceUrlError,
    TracingUnavailableError,
)

__all__ = ["DB_ENV", "DEFAULT_DB", "Invocation", "exit_code", "run_command"]


def exit_code(exc: BaseException, *, running: bool) -> int:
    """The exit code an error ends a command with.

    2 for what the operator named wrongly (an option, a thread, a checkpoint, a node, a
    channel, a store, a graph that does not fit the thread, a queued run, a schedule, a server
    configuration ``plait serve`` cannot start with, or ``--otel`` without its extra); 1 for
    a run that failed and for a command the store could not carry out. A state, graph or
    memory item error raised while the graph runs (a node writing an unknown channel, routing
    to a missing node, putting a value the memory store cannot hold) is the run failing.
    """
    if isinstance(exc, NotConfirmedError):
        return EXIT_FAILED if exc.declined else EXIT_USAGE
    if isinstance(
        exc,
        CommandLineError
        | StoreAddressError
        | CheckpointNotFoundError
        | AmbiguousCheckpointError
        | ThreadExistsError
        | InvalidResumeError
        | GraphChangedError
        | RunNotFoundError
        | ScheduleNotFoundError
        | ServeConfigError
        | StoreUnsupportedError
        | TracingUnavailableError
        | TraceUrlError,
    ):
        return EXIT_USAGE
    if isinstance(exc, StateError | GraphError | InvalidNamespaceError | InvalidMemoryError | MemoryFilterError):
        return EXIT_FAILED if running else EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_CTRL_C
    return EXIT_FAILED


def error_record(exc: BaseException, message: str, code: int) -> dict[str, Any]:
    """The ``--json`` form of an error: ``error`` (its class), ``message``, ``exit_code``,
    and the facts it carries (``thread_id``, ``checkpoint_id``, ``node``, ``step``, ...)."""
    record: dict[str, Any] = {"error": type(exc).__name__, "message": message, "exit_code": code}
    for name in ("thread_id", "checkpoint_id", "node", "step", "channel", "target", "option"):
        value = getattr(exc, name, None)
        if isinstance(value, str | int) and not isinstance(value, bool):
            record[name] = value
    candidates = getattr(exc, "candidates", None)
    if isinstance(exc, AmbiguousCheckpointError) and candidates:
        record["candidates"] = [{"checkpoint_id": cid, "step": step} for cid, step in candidates]
    return record


def report(exc: BaseException, message: str, code: int, *, as_json: bool) -> None:
    """Write an error: one line on stderr, or one JSON object there with ``--json``."""
    import sys

    if as_json:
        print(to_json_text(error_record(exc, message, code), indent=False), file=sys.stderr, flush=True)
    else:
        print(f"error: {message}", file=sys.stderr, flush=True)


def run_command(body: Callable[[Invocation], None], *, as_json: bool, debug: bool, db: str | None = None) -> None:
    """Run a command body: build its :class:`Invocation`, keep stdout for its result, close
    what it opened, and turn an error into one line (or one JSON object) and an exit code.

    Raises:
        Exit: always when the body failed (after the error was written), and when the body
            asked for a code of its own (3, the run paused).
    """
    if not debug:
        # psycopg's pool logs each failed connection attempt (several lines each); the error
        # that ends the command says the same in one line. --debug lets them through.
        logging.getLogger("psycopg").addHandler(logging.NullHandler())
        logging.getLogger("psycopg").propagate = False
    with reserved_stdout() if as_json else _plain_stdout() as stream:
        inv = Invocation(Out.make(as_json, stream), db, debug)
        try:
            try:
                body(inv)
            finally:
                inv.close()
        except Exit:
            raise
        except (Exception, KeyboardInterrupt) as exc:
            if debug:
                traceback.print_exc()
            code = exit_code(exc, running=inv.running)
            message = describe(exc, inv)
            message = _scrub(message, inv.db)
            report(exc, message, code, as_json=as_json)
            raise Exit(code) from None


@contextmanager
def _plain_stdout() -> Iterator[Any]:
    import sys

    yield sys.stdout


def _scrub(message: str, address: str) -> str:
    """``message`` with the password of ``address`` (a DSN), wherever it appears, hidden."""
    import urllib.parse

    try:
        password = urllib.parse.urlsplit(address).password
    except ValueError:
        password = None
    if password:
        message = message.replace(address, redact(address)).replace(password, "***")
        unquoted = urllib.parse.unquote(password)
        if unquoted != password:
            message = message.replace(unquoted, "***")
    return message
