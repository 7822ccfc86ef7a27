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
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from plait._sync import run_sync
from plait.checkpoint.address import redact
from plait.checkpoint.base import Checkpointer
from plait.cli.messages import describe
from plait.cli.output import EXIT_CTRL_C, EXIT_FAILED, EXIT_USAGE, Exit, Out, reserved_stdout, to_json_text
from plait.errors import (
    AmbiguousCheckpointError,
    CheckpointNotFoundError,
    CommandLineError,
    GraphChangedError,
    GraphError,
    InvalidResumeError,
    NotConfirmedError,
    RunNotFoundError,
    ScheduleNotFoundError,
    StateError,
    StoreAddressError,
    ThreadExistsError,
)

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph

__all__ = ["DB_ENV", "DEFAULT_DB", "Invocation", "exit_code", "run_command"]

DEFAULT_DB = "plait.db"
DB_ENV = "PLAIT_DB"
"""The environment variable that is the default for ``--db``."""
CONNECT_TIMEOUT = 10.0
"""Seconds the command line waits for a PostgreSQL connection (the library waits 30): an
operator who mistyped a host should hear about it soon."""


class Invocation:
    """One command's run: its output, its store address, and the stores it opened.

    Attributes that error messages use to name the command to run next (``target``,
    ``namespace``) are filled in by the command as it learns them.
    """

    def __init__(self, out: Out, db: str | None, debug: bool) -> None:
        self.out = out
        self.db_given = db
        """``--db`` as given on the command line (None: not given)."""
        self.debug = debug
        self.target: str | None = None
        """The MODULE:GRAPH the command loaded, for hints (``plait resume TARGET T``)."""
        self.namespace = ""
        self.running = False
        """True while a graph runs: errors raised then are the run's failure (exit 1)."""
        self._stores: list[Checkpointer] = []

    @property
    def db(self) -> str:
        """The store address: ``--db``, else ``$PLAIT_DB``, else ``plait.db``."""
        return self.db_given or os.environ.get(DB_ENV) or DEFAULT_DB

    @property
    def shown_db(self) -> str:
        """:attr:`db` as it may be printed: a DSN's password replaced by ``***``."""
        return redact(self.db)

    @property
    def db_chosen(self) -> bool:
        """Whether a store was chosen (``--db`` or ``$PLAIT_DB``), rather than defaulted."""
        return bool(self.db_given or os.environ.get(DB_ENV))

    def flags(self, *, db: bool = True) -> str:
        """`` --db X --namespace N`` as a command needs them to find this command's thread
        again (empty where the defaults do)."""
        out = ""
        if db and self.db_given:
            out += f" --db {_quote(redact(self.db_given))}"
        if self.namespace:
            out += f" --namespace {_quote(self.namespace)}"
        return out

    def store(self, address: str | None = None, *, create: bool = False) -> Checkpointer:
        """Open (and set up) the store at ``address`` (default: :attr:`db`), to be closed when
        the command ends. Without ``create``, a SQLite file or folder that is not there is
        refused, so that a typo leaves no empty database behind."""
        from plait.checkpoint.address import open as open_store

        address = address or self.db
        options = {"connect_timeout": CONNECT_TIMEOUT} if address.startswith(("postgres://", "postgresql://")) else {}
        store = open_store(address, create=create, **options)
        self._stores.append(store)
        run_sync(store.asetup())
        return store

    def graph(
        self,
        target: str,
        *,
        namespace: str | None = None,
        need_store: bool = True,
        create: bool = True,
        store: Checkpointer | None = None,
    ) -> "CompiledGraph":
        """Load ``target`` and compile it on this command's store.

        A CompiledGraph keeps its own store when none was chosen (neither ``--db`` nor
        ``$PLAIT_DB``); ``namespace`` (``--namespace``), when given, replaces the graph's.
        ``create=False`` refuses a store that does not exist yet (what a command that reads
        or edits a thread wants); ``store``, one this command opened already, is used as it is.
        """
        from plait.cli.loading import load_graph

        self.target = target
        app = load_graph(target)
        if store is None and need_store and (app.checkpointer is None or self.db_chosen):
            store = self.store(create=create)
        if store is not None or (namespace is not None and namespace != app.namespace):
            app = app.bind(
                checkpointer=store if store is not None else app.checkpointer,
                namespace=app.namespace if namespace is None else namespace,
            )
        self.namespace = app.namespace
        return app

    def close(self) -> None:
        """Close the stores this command opened, newest first."""
        while self._stores:
            run_sync(self._stores.pop().aclose())

    @contextmanager
    def run_phase(self) -> Iterator[None]:
        """Mark the part of the command in which the graph runs (see :func:`exit_code`)."""
        self.running = True
        try:
            yield
        finally:
            self.running = False


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def exit_code(exc: BaseException, *, running: bool) -> int:
    """The exit code an error ends a command with.

    2 for what the operator named wrongly (an option, a thread, a checkpoint, a node, a
    channel, a store, a graph that does not fit the thread, a queued run or a schedule); 1 for
    a run that failed and for a command the store could not carry out. A state or graph error
    raised while the graph runs (a node writing an unknown channel, routing to a missing node)
    is the run failing.
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
        | ScheduleNotFoundError,
    ):
        return EXIT_USAGE
    if isinstance(exc, StateError | GraphError):
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
