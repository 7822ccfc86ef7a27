"""The ``plait db`` commands: look after a store (``migrate``, ``prune``, ``stats``, ``sweep``,
``vacuum``, ``retention``; ``stats`` and ``vacuum`` are in :mod:`plait.cli.space`,
``retention`` in :mod:`plait.cli.retention`).

``prune`` shows what it would drop (``--dry-run``), asks before dropping (``--yes`` for
scripts), and reports the space it gave back: on SQLite it runs an incremental vacuum
afterwards (:meth:`~plait.checkpoint.base.Checkpointer.reclaim_space`), because SQLite
otherwise keeps the freed pages and the file never shrinks. A DSN's password is never printed.
"""

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer
from plait.cli.arguments import check_positive, confirm, plural
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, Yes
from plait.cli.space import cmd_db_stats, cmd_db_vacuum, human_size
from plait.errors import CheckpointNotFoundError, StoreNotFoundError

__all__ = [
    "checkpointer_bytes",
    "checkpointer_kind",
    "cmd_db_migrate",
    "cmd_db_prune",
    "cmd_db_sweep",
    "register",
]


def checkpointer_kind(checkpointer: Checkpointer) -> str:
    """``sqlite``, ``postgres``, ``file``, ``memory``, or the class name of a backend that does
    not say (see :attr:`Capabilities.kind`)."""
    return checkpointer.capabilities.kind or type(checkpointer).__name__


def checkpointer_bytes(checkpointer: Checkpointer) -> int | None:
    """The bytes a store takes on this machine's disk (see :meth:`Checkpointer.disk_bytes`)."""
    return checkpointer.disk_bytes()


def cmd_db_migrate(inv: Invocation) -> None:
    """Create the store, or bring its schema up to date, and say which it did: an operator
    who mistyped a path should read that a new store was created, not that one is current."""
    try:
        checkpointer = inv.checkpointer()
        created = False
    except StoreNotFoundError:  # no SQLite file or file-store folder there yet
        checkpointer = inv.checkpointer(create=True)
        created = True
    shown = inv.shown_db
    runs = None
    if checkpointer_kind(checkpointer) == "postgres":  # the run tables and the job queue live beside the checkpoints
        from plait.cli.runs import migrate_runs

        created = bool(getattr(checkpointer, "created", False))  # its setup found no tables: a new store
        runs = migrate_runs(inv.db)
    if inv.out.json:
        inv.out.emit({"store": shown, "migrated": True, "created": created, "runs": runs})
    else:
        done = "created a new store with the current schema" if created else "schema up to date"
        inv.out.line(f"{shown}: {done}" + (f"; {runs}" if runs else ""))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """What pruning one thread drops."""

    namespace: str
    thread_id: str
    checkpoints: int
    dropped: int
    exact: bool
    """False when the thread has side branches (from time travel) that the checkpointer API
    cannot list: ``dropped`` is then the most that can go."""

    def record(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "namespace": self.namespace,
            "checkpoints": self.checkpoints,
            "dropped": self.dropped,
            "exact": self.exact,
        }


def _plan(checkpointer: Checkpointer, thread: str | None, namespace: str | None, keep_last: int) -> list[_Plan]:
    """What ``prune(keep_last)`` drops from each thread, read without dropping anything.

    Prune keeps the ``keep_last`` newest checkpoints of every branch's lineage; a thread
    whose checkpoints all lie on its head's lineage (no time-travel branch) drops exactly the
    rest of that lineage.
    """
    listed = run_sync(checkpointer.alist_threads(namespace=None if thread is None else namespace or ""))
    if thread is not None:
        listed = [t for t in listed if t.thread_id == thread]
        if not listed:
            raise CheckpointNotFoundError(thread, None, namespace or "")
    elif namespace is not None:
        listed = [t for t in listed if t.namespace == namespace]
    plans = []
    for t in listed:
        lineage = len(run_sync(checkpointer.ahistory(t.thread_id, namespace=t.namespace)))
        exact = lineage >= t.checkpoints
        dropped = max(0, t.checkpoints - min(keep_last, lineage))
        plans.append(
            _Plan(namespace=t.namespace, thread_id=t.thread_id, checkpoints=t.checkpoints, dropped=dropped, exact=exact)
        )
    return plans


def cmd_db_prune(
    inv: Invocation, thread: str | None, keep_last: int, namespace: str | None, *, dry_run: bool, yes: bool
) -> None:
    check_positive(keep_last, "--keep-last")
    checkpointer = inv.checkpointer()
    plans = _plan(checkpointer, thread, namespace, keep_last)
    total = sum(p.dropped for p in plans)
    exact = all(p.exact for p in plans)
    before = checkpointer_bytes(checkpointer)
    out = inv.out
    shown = inv.shown_db
    record: dict[str, Any] = {
        "store": shown,
        "keep_last": keep_last,
        "dry_run": dry_run,
        "threads": [p.record() for p in plans if p.dropped],
        "dropped": total,
        "exact": exact,
        "bytes_before": before,
        "bytes_after": before,
        "bytes_freed": 0 if before is not None else None,
    }
    affected = [p for p in plans if p.dropped]
    up_to = "" if exact else "up to "
    if dry_run or not affected:
        if out.json:
            out.emit(record)
        elif not affected:
            out.line(f"nothing to prune in {shown}: no thread has more than {keep_last} checkpoints per branch")
        else:
            out.line(
                f"would drop {up_to}{plural(total, 'checkpoint')} from {plural(len(affected), 'thread')} "
                f"(keeping {keep_last} per branch):"
            )
            for p in affected:
                about = "" if p.exact else " (at most: it has side branches)"
                out.line(
                    f"  {p.thread_id}{'  ' + p.namespace if p.namespace else ''}: {p.dropped} of {p.checkpoints}{about}"
                )
        return
    confirm(
        f"drop {up_to}{plural(total, 'checkpoint')} from {plural(len(affected), 'thread')} in {shown}, "
        f"keeping the {keep_last} newest of each branch?",
        "prune",
        yes,
    )
    dropped = {
        (p.namespace, p.thread_id): run_sync(
            checkpointer.aprune(p.thread_id, keep_last=keep_last, namespace=p.namespace)
        )
        for p in affected
    }
    _reclaim(checkpointer)
    after = checkpointer_bytes(checkpointer)
    record["threads"] = [
        {**p.record(), "dropped": dropped[(p.namespace, p.thread_id)], "exact": True} for p in affected
    ]
    record["dropped"] = sum(dropped.values())
    record["exact"] = True
    record["bytes_after"] = after
    record["bytes_freed"] = None if before is None or after is None else before - after
    if out.json:
        out.emit(record)
        return
    space = (
        ""
        if before is None or after is None
        else f"; {human_size(before)} -> {human_size(after)} ({human_size(before - after)} freed)"
    )
    out.line(
        f"dropped {plural(record['dropped'], 'checkpoint')} from {plural(len(affected), 'thread')} "
        f"(keeping {keep_last} per branch){space}"
    )


def cmd_db_sweep(inv: Invocation, *, dry_run: bool = False) -> None:
    """Delete the expired memory items and apply the retention policy (``plait worker`` and
    ``plait serve`` do both periodically; this is for a store neither runs on, or for now).
    Asks nothing: the policy was chosen when it was stored (``plait db retention``)."""
    from plait.cli.retention import sweep_lines

    checkpointer = inv.checkpointer()
    keeps_memory = checkpointer.capabilities.memory
    swept = checkpointer.store.sweep() if keeps_memory and not dry_run else None
    report = checkpointer.sweep(dry_run=dry_run)
    if inv.out.json:
        inv.out.emit({"store": inv.shown_db, "swept": swept, "retention": report.to_json()})
        return
    if swept is not None:
        inv.out.line(f"swept {plural(swept, 'expired memory item')} from {inv.shown_db}")
    for line in sweep_lines(report):
        inv.out.line(line)


def _reclaim(checkpointer: Checkpointer) -> None:
    """Give the freed space back to the file system, where the store keeps it (SQLite's
    incremental vacuum; a SQLite file made before that needs ``plait db vacuum`` once)."""
    checkpointer.reclaim_space()


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The ``db`` group: ``migrate``, ``prune``, ``stats``, ``sweep``, ``vacuum``."""
    db_app = typer.Typer(help="Look after a store: migrate, prune, stats, sweep, vacuum.", no_args_is_help=True)
    app.add_typer(db_app, name="db")

    @db_app.command("migrate")
    def db_migrate(db: Db = None, as_json: Json = False, debug: Debug = False) -> None:
        """Create the store, or bring its schema up to date (safe to repeat)."""
        run_command(cmd_db_migrate, as_json=as_json, debug=debug, db=db)

    @db_app.command("prune")
    def db_prune(
        keep_last: Annotated[
            int,
            typer.Option(
                "--keep-last",
                metavar="N",
                help="Checkpoints to keep of every branch, newest first.",
                show_default=False,
            ),
        ],
        thread: Annotated[
            str | None, typer.Option("--thread", "-t", metavar="THREAD", help="Only this thread (default: all).")
        ] = None,
        namespace: Annotated[
            str | None,
            typer.Option("--namespace", metavar="NS", help="Only this namespace (default: all; with --thread: '')."),
        ] = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", metavar="", help="Say what would be dropped; drop nothing.")
        ] = False,
        yes: Yes = False,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Drop old checkpoints (never one a live branch or a delta needs) and give the space back."""
        run_command(
            lambda inv: cmd_db_prune(inv, thread, keep_last, namespace, dry_run=dry_run, yes=yes),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @db_app.command("stats")
    def db_stats(
        top: Annotated[int, typer.Option("--top", metavar="N", help="How many of the largest threads to show.")] = 10,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """What a store holds: threads, checkpoints and bytes per namespace, the largest
        threads, bytes on disk, and the dead space deleting and pruning left."""
        run_command(lambda inv: cmd_db_stats(inv, top), as_json=as_json, debug=debug, db=db)

    @db_app.command("vacuum")
    def db_vacuum(db: Db = None, as_json: Json = False, debug: Debug = False) -> None:
        """Rewrite the store without its free space (SQLite: VACUUM, once for a file made before
        incremental vacuum; PostgreSQL: VACUUM of plait's tables)."""
        run_command(cmd_db_vacuum, as_json=as_json, debug=debug, db=db)

    @db_app.command("sweep")
    def db_sweep(
        dry_run: Annotated[
            bool,
            typer.Option("--dry-run", metavar="", help="Say what the retention policy would remove; change nothing."),
        ] = False,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Delete expired memory items and apply the retention policy now (asks nothing; exit 0)."""
        run_command(lambda inv: cmd_db_sweep(inv, dry_run=dry_run), as_json=as_json, debug=debug, db=db)

    from plait.cli.retention import register_retention

    register_retention(db_app)
