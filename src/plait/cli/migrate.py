"""``plait migrate MODULE:GRAPH``: carry a graph's stored threads over to its version ahead
of time (:meth:`plait.CompiledGraph.migrate`), instead of at each thread's next run.

A thread a run holds is skipped and listed (migrate again later: the next run migrates it
anyway); a migration that raises leaves its thread as it was, is listed with its error, and
makes the command end with exit code 1 once the other threads are done. On a terminal a
spinner counts the threads as they go.
"""

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plait._sync import run_sync
from plait.cli.arguments import plural
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, OptNamespace, Target
from plait.cli.output import EXIT_FAILED, Exit
from plait.errors import ArgumentError

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph, MigrationResult

__all__ = ["cmd_migrate", "register"]


class _Counting:
    """A spinner on stderr counting the threads done, when stderr is a terminal."""

    def __init__(self, dry_run: bool) -> None:
        self.done = 0
        self.verb = "checking" if dry_run else "migrating"
        self._status: Any = None
        if sys.stderr.isatty():
            try:
                from rich.console import Console

                self._status = Console(stderr=True).status(f"{self.verb} threads…")
                self._status.start()
            except ImportError:
                pass

    def __call__(self, result: "MigrationResult") -> None:
        self.done += 1
        if self._status is not None:
            self._status.update(f"{self.verb} threads: {self.done} done (last: {result.thread_id} {result.status})")

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _record(r: "MigrationResult", namespace: str) -> dict[str, Any]:
    error = None if r.error is None else {"type": type(r.error).__name__, "message": str(r.error)}
    return {
        "thread_id": r.thread_id,
        "namespace": namespace,
        "status": r.status,
        "from_version": r.from_version,
        "to_version": r.to_version,
        "checkpoint_id": r.checkpoint_id,
        "error": error,
    }


def cmd_migrate(inv: Invocation, app: "CompiledGraph", thread: str | None, *, dry_run: bool) -> None:
    """Migrate ``thread`` (None: every thread of the graph) and say what happened; exit 1
    when a migration failed."""
    version = app.spec.lineage.version if app.spec.lineage is not None else None
    counting = _Counting(dry_run)
    try:
        results = run_sync(app.amigrate(thread, dry_run=dry_run, on_result=counting))
    finally:
        counting.close()
    ns = app.namespace
    older = [r for r in results if r.status != "current"]
    busy = [r.thread_id for r in results if r.status == "busy"]
    failed = [r for r in results if r.status == "failed"]
    done = [r for r in results if r.status in ("migrated", "would_migrate")]
    out = inv.out
    if out.json:
        out.emit(
            {
                "graph": app.name,
                "namespace": ns,
                "version": version,
                "dry_run": dry_run,
                "threads": [_record(r, ns) for r in older],
                "migrated": 0 if dry_run else len(done),
                "current": len(results) - len(older),
                "busy": busy,
                "failed": len(failed),
            }
        )
    else:
        _say(inv, app, version, results, dry_run=dry_run)
    if failed:
        raise Exit(EXIT_FAILED)


def _say(
    inv: Invocation, app: "CompiledGraph", version: int | None, results: "list[MigrationResult]", *, dry_run: bool
) -> None:
    out = inv.out
    if version is None:
        out.line(
            f"{app.name} has no version (compile it with version=N and migrations=...): its threads have nothing to "
            "migrate"
        )
        return
    done = [r for r in results if r.status in ("migrated", "would_migrate")]
    current = sum(r.status == "current" for r in results)
    verb = "would migrate" if dry_run else "migrated"
    if done:
        out.line(f"{verb} {plural(len(done), 'thread')} of {app.name} to version {version}:")
        for r in done:
            out.line(f"  {r.thread_id}: version {r.from_version} -> {r.to_version}")
    else:
        out.line(f"nothing to migrate: no thread of {app.name} is older than version {version}")
    if current:
        out.line(f"{plural(current, 'thread')} at version {version} or newer already")
    busy = [r.thread_id for r in results if r.status == "busy"]
    if busy:
        out.line(f"skipped {plural(len(busy), 'busy thread')} (a run holds it; run plait migrate again later):")
        for t in busy:
            out.line(f"  {t}")
    for r in results:
        if r.status == "failed":
            out.line(f"failed {r.thread_id} (left unchanged): {r.error}")


def register(app: typer.Typer) -> None:
    """The ``migrate`` command."""

    @app.command()
    def migrate(
        target: Target,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", metavar="", help="Say what would be migrated; write nothing.")
        ] = False,
        thread: Annotated[
            str | None,
            typer.Option("--thread", "-t", metavar="THREAD", help="Migrate this thread only.", show_default=False),
        ] = None,
        all_: Annotated[
            bool,
            typer.Option(
                "--all", metavar="", help="Migrate every thread of the graph (by the name its threads record)."
            ),
        ] = False,
        db: Db = None,
        namespace: OptNamespace = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Migrate stored threads to the graph's version now, rather than at their next run (exit 1: one failed)."""

        def body(inv: Invocation) -> None:
            if thread is not None and all_:
                raise ArgumentError("--all", "give --thread THREAD or --all, not both")
            if thread is None and not all_ and not dry_run:
                raise ArgumentError("--all", "say which threads: --thread THREAD, or --all for every one")
            graph = inv.graph(target, namespace=namespace, create=False)
            cmd_migrate(inv, graph, thread, dry_run=dry_run)

        run_command(body, as_json=as_json, debug=debug, db=db)
