"""``plait db retention`` and the retention half of ``plait db sweep``.

``db retention`` stores the policy every process opening the store sweeps by (see
:mod:`plait.checkpoint._stored_policy`); ``db sweep`` applies it now, with each thread's own,
and asks nothing: the policy was chosen when it was stored. A thread a run holds is listed as
skipped, never an error (exit 0).
"""

from typing import Annotated

import typer

from plait.checkpoint.retention import Retention, RetentionAction, SweepReport
from plait.cli.arguments import parse_duration, plural
from plait.cli.context import run_command
from plait.cli.invocation import Invocation
from plait.cli.options import Db, Debug, Json
from plait.errors import ArgumentError

__all__ = ["cmd_db_retention", "describe_policy", "register_retention", "sweep_lines"]


def describe_policy(policy: Retention | None) -> str:
    """A policy in words, for a terminal."""
    if policy is None:
        return "none (threads are kept unless their own metadata says otherwise)"
    what = "delete the thread" if policy.action == "delete" else "keep only its head"
    kept = "interrupted threads kept whole" if policy.keep_interrupted else "interrupted threads reduced to their head"
    return f"after {_span(policy.after)} idle, {what} ({kept})"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def cmd_db_retention(
    inv: Invocation, after: str | None, action: str | None, keep_interrupted: bool | None, *, off: bool
) -> None:
    """Show, store or remove (``--off``) the store's retention policy."""
    if off and (after is not None or action is not None or keep_interrupted is not None):
        raise ArgumentError("--off", "--off removes the stored policy: give it alone, without --after or --action")
    if after is None and (action is not None or keep_interrupted is not None):
        raise ArgumentError("--after", "--after is required to store a policy, e.g. plait db retention --after 30d")
    if action is not None and action not in ("delete", "keep_latest"):
        raise ArgumentError("--action", f"--action is delete or keep_latest, got {action!r}")
    checkpointer = inv.checkpointer()
    changed = off or after is not None
    if off:
        checkpointer.clear_stored_retention()
    elif after is not None:
        act: RetentionAction = "keep_latest" if action == "keep_latest" else "delete"
        policy = Retention(
            after=parse_duration(after, "--after"), action=act, keep_interrupted=keep_interrupted is not False
        )
        checkpointer.set_stored_retention(policy)
    stored = checkpointer.get_stored_retention()
    if inv.out.json:
        inv.out.emit(
            {"store": inv.shown_db, "retention": None if stored is None else stored.to_json(), "changed": changed}
        )
        return
    if off:
        inv.out.line(f"retention policy removed from {inv.shown_db}")
    else:
        verb = "stored in" if changed else "of"
        inv.out.line(f"retention policy {verb} {inv.shown_db}: {describe_policy(stored)}")


def sweep_lines(report: SweepReport) -> list[str]:
    """What a retention sweep did, for a terminal (nothing when it had nothing to do)."""
    if report.held_elsewhere:
        return ["retention: another process is sweeping this database now; nothing was changed"]
    if report.policy is None and not (report.deleted or report.reduced or report.skipped_busy or report.invalid):
        return []
    lines = [f"retention ({describe_policy(report.policy)}):"]
    freed = "" if report.bytes_freed is None else f", {report.bytes_freed} bytes freed"
    lines.append(
        f"  deleted {plural(len(report.deleted), 'thread')}, reduced {plural(len(report.reduced), 'thread')}, "
        f"removed {plural(report.checkpoints_removed, 'checkpoint')}{freed}"
    )
    for label, found in (("skipped (busy)", report.skipped_busy), ("kept (bad 'retention' metadata)", report.invalid)):
        for ns, tid in found:
            lines.append(f"  {label}: {tid}{'  ' + ns if ns else ''}")
    return lines


def register_retention(db_app: typer.Typer) -> None:
    """``plait db retention``, in the ``db`` group."""

    @db_app.command("retention")
    def db_retention(
        after: Annotated[
            str | None,
            typer.Option(
                "--after", metavar="SPAN", help="Sweep threads idle this long: 30d, 12h, 90m, 45s or seconds."
            ),
        ] = None,
        action: Annotated[
            str | None,
            typer.Option("--action", metavar="ACTION", help="delete (the default) or keep_latest (keep the head)."),
        ] = None,
        keep_interrupted: Annotated[
            bool | None,
            typer.Option(
                "--keep-interrupted/--no-keep-interrupted",
                help="Keep threads waiting on an interrupt whole (the default), or reduce them to their head.",
                show_default=False,
            ),
        ] = None,
        off: Annotated[bool, typer.Option("--off", metavar="", help="Remove the stored policy.")] = False,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Show, store (--after) or remove (--off) the retention policy every process sweeps by."""
        run_command(
            lambda inv: cmd_db_retention(inv, after, action, keep_interrupted, off=off),
            as_json=as_json,
            debug=debug,
            db=db,
        )
