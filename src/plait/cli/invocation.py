"""What one command knows of itself while it runs: its output, its store address (and the
stores it opened), the graph target and namespace it was given, and whether a graph runs.

Below :mod:`plait.cli.context` (which runs a command body and reports its error) and
:mod:`plait.cli.messages` (which names the command to run next from these facts), so that
neither imports the other to name the type.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from plait._sync import run_sync
from plait.checkpoint.address import redact
from plait.checkpoint.base import Checkpointer
from plait.cli.output import Out

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph

__all__ = ["CONNECT_TIMEOUT", "DB_ENV", "DEFAULT_DB", "Invocation"]

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
        self.context: str | None = None
        """``--context`` as given (JSON or @file): it is never stored, so a hint that runs the
        graph again repeats it (:meth:`run_flags`)."""
        self.running = False
        """True while a graph runs: errors raised then are the run's failure (exit 1)."""
        self._checkpointers: list[Checkpointer] = []

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

    def run_flags(self) -> str:
        """:meth:`flags`, plus the ``--context`` this run was given: what a command that runs
        the graph again (``plait resume``, ``plait run``) needs, the context not being stored."""
        extra = f" --context {_quote(self.context)}" if self.context is not None else ""
        return self.flags() + extra

    def checkpointer(self, address: str | None = None, *, create: bool = False) -> Checkpointer:
        """Open (and set up) the store at ``address`` (default: :attr:`db`), to be closed when
        the command ends. Without ``create``, a SQLite file or folder that is not there is
        refused, so that a typo leaves no empty database behind."""
        from plait.checkpoint.address import open as open_store

        address = address or self.db
        options = {"connect_timeout": CONNECT_TIMEOUT} if address.startswith(("postgres://", "postgresql://")) else {}
        checkpointer = open_store(address, create=create, **options)
        self._checkpointers.append(checkpointer)
        run_sync(checkpointer.asetup())
        return checkpointer

    def graph(
        self,
        target: str,
        *,
        namespace: str | None = None,
        need_store: bool = True,
        create: bool = True,
        checkpointer: Checkpointer | None = None,
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
        if checkpointer is None and need_store and (app.checkpointer is None or self.db_chosen):
            checkpointer = self.checkpointer(create=create)
        if checkpointer is not None or (namespace is not None and namespace != app.namespace):
            app = app.bind(
                checkpointer=checkpointer if checkpointer is not None else app.checkpointer,
                namespace=app.namespace if namespace is None else namespace,
            )
        self.namespace = app.namespace
        return app

    def close(self) -> None:
        """Close the stores this command opened, newest first."""
        while self._checkpointers:
            run_sync(self._checkpointers.pop().aclose())

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
