"""The ``plait db`` commands: look after a store (``migrate``, ``prune``, ``stats``)."""

import os
from typing import Annotated, Any

import typer

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer
from plait.cli.arguments import DEFAULT_DB
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json
from plait.cli.output import Out, UsageError

__all__ = ["cmd_db_prune", "cmd_db_stats", "register"]


def cmd_db_stats(store: Checkpointer, db: str, out: Out) -> None:
    threads = run_sync(store.alist_threads(namespace=None))
    stats: dict[str, Any] = {
        "store": db,
        "threads": len(threads),
        "checkpoints": sum(t.checkpoints for t in threads),
        "namespaces": sorted({t.namespace for t in threads}),
    }
    if os.path.exists(db):
        stats["bytes"] = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
    if out.json:
        out.emit(stats)
        return
    for k, v in stats.items():
        out.line(f"{k}: {v}")


def cmd_db_prune(store: Checkpointer, thread: str | None, keep_last: int, namespace: str | None, out: Out) -> None:
    if keep_last < 1:
        raise UsageError("--keep-last must be at least 1")
    if thread is not None:
        targets = [(namespace or "", thread)]
    else:
        targets = [(t.namespace, t.thread_id) for t in run_sync(store.alist_threads(namespace=namespace))]
    dropped = {
        f"{ns}/{t}" if ns else t: run_sync(store.aprune(t, keep_last=keep_last, namespace=ns)) for ns, t in targets
    }
    if out.json:
        out.emit({"dropped": dropped, "total": sum(dropped.values())})
    else:
        out.line(f"dropped {sum(dropped.values())} checkpoints from {len(dropped)} threads (keeping {keep_last})")


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The ``db`` group: ``migrate``, ``prune``, ``stats``."""
    db_app = typer.Typer(help="Look after the store: migrate, prune, stats.", no_args_is_help=True)
    app.add_typer(db_app, name="db")

    @db_app.command("migrate")
    def db_migrate(db: Db = DEFAULT_DB, as_json: Json = False, debug: Debug = False) -> None:
        """Create the store, or bring its schema up to date."""

        def body(inv: Invocation) -> None:
            inv.store(create=True)
            if inv.out.json:
                inv.out.emit({"store": db, "migrated": True})
            else:
                inv.out.line(f"{db}: up to date")

        run_command(body, as_json=as_json, debug=debug, db=db)

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
        run_command(
            lambda inv: cmd_db_prune(inv.store(), thread, keep_last, namespace, inv.out),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @db_app.command("stats")
    def db_stats(db: Db = DEFAULT_DB, as_json: Json = False, debug: Debug = False) -> None:
        """How many threads and checkpoints a store holds."""
        run_command(lambda inv: cmd_db_stats(inv.store(), db, inv.out), as_json=as_json, debug=debug, db=db)
