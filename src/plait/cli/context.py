"""What one running command owns: where it writes, the stores it opened, and how it ends.

Every command body runs inside :func:`run_command`, which builds its :class:`Invocation`,
closes every store the body opened through it when the body ends (whatever way it ends), and
turns errors into one line on stderr and an exit code. Nothing is kept at module level, so
two commands run in one process (the tests do) never share or leak a store.
"""

import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer
from plait.cli.arguments import DEFAULT_DB, load_target
from plait.cli.output import EXIT_FAILED, EXIT_USAGE, Exit, Out, UsageError, fail
from plait.errors import PlaitError

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph

__all__ = ["Invocation", "run_command"]


class Invocation:
    """One command's run: its output, its ``--db`` and the stores it opened."""

    def __init__(self, out: Out, db: str | None, debug: bool) -> None:
        self.out = out
        self.db = db
        """The ``--db`` given, or None (commands that may use a graph's own store)."""
        self.debug = debug
        self._stores: list[Checkpointer] = []

    def store(self, db: str | None = None, *, create: bool = False) -> Checkpointer:
        """Open (and set up) the store at ``db`` (default: this command's ``--db``), to be
        closed when the command ends. Without ``create``, a SQLite file that is not there is
        a usage error, so that a typo leaves no empty database behind."""
        import os

        from plait.graph.compiled import coerce_checkpointer

        address = db or self.db or DEFAULT_DB
        if not address.startswith(("postgres://", "postgresql://")) and not create and not os.path.exists(address):
            raise UsageError(f"no database at {address!r}: pass --db PATH (a SQLite file or a postgresql:// DSN)")
        saver = coerce_checkpointer(address)
        assert saver is not None
        self._stores.append(saver)
        run_sync(saver.asetup())
        return saver

    def graph(self, target: str, *, need_store: bool = True) -> "CompiledGraph":
        """Compile ``target`` on this command's store (a CompiledGraph keeps its own store
        when no --db is given)."""
        from plait.graph.builder import Dag, Graph
        from plait.graph.compiled import CompiledGraph

        obj = load_target(target)
        if not isinstance(obj, Graph | Dag | CompiledGraph) and callable(obj):
            obj = obj()
        store: Checkpointer | None = None
        if need_store and not (isinstance(obj, CompiledGraph) and obj.checkpointer is not None and self.db is None):
            store = self.store(create=True)
        if isinstance(obj, Graph | Dag):
            return obj.compile(checkpointer=store)
        if isinstance(obj, CompiledGraph):
            if store is None:
                return obj
            return CompiledGraph(
                obj.spec,
                checkpointer=store,
                namespace=obj.namespace,
                interrupt_before=tuple(obj.interrupt_before),
                interrupt_after=tuple(obj.interrupt_after),
                name=obj.name,
            )
        raise UsageError(f"{target!r} is a {type(obj).__name__}, not a Graph, Dag or CompiledGraph")

    def close(self) -> None:
        """Close the stores this command opened, newest first."""
        while self._stores:
            run_sync(self._stores.pop().aclose())


def run_command(body: Callable[[Invocation], None], *, as_json: bool, debug: bool, db: str | None = None) -> None:
    """Run a command body, turning errors into one line and an exit code."""
    inv = Invocation(Out.make(as_json), db, debug)
    try:
        try:
            body(inv)
        finally:
            inv.close()
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
