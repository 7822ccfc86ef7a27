"""``plait db stats`` and ``plait db vacuum``: where a store's space goes, and giving it back.

``stats`` shows every namespace's threads, checkpoints and bytes and the largest threads
(:func:`plait.checkpoint.space.summarize`: a subgraph's namespaces are counted with the thread
that ran them), the store's size on this machine's disk, and its dead space: what deleting
and pruning left behind (SQLite's free pages; PostgreSQL's dead rows, their bytes
estimated). ``vacuum`` is the operator's one-off rewrite
(:meth:`~plait.checkpoint.base.Checkpointer.areclaim_space` with ``full=True``): on SQLite it
also converts a file made before plait turned on incremental vacuum.
"""

from typing import Any

from plait._sync import run_sync
from plait.checkpoint.space import DeadSpace, summarize
from plait.cli.arguments import check_positive
from plait.cli.context import Invocation

__all__ = ["cmd_db_stats", "cmd_db_vacuum", "human_size"]


def human_size(n: int | None) -> str:
    """``n`` bytes for a person (``?`` when unknown)."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _dead(dead: DeadSpace | None) -> dict[str, Any] | None:
    if dead is None:
        return None
    return {"bytes": dead.bytes, "rows": dead.rows, "estimated": dead.estimated, "reclaim": dead.reclaim}


def cmd_db_stats(inv: Invocation, top: int) -> None:
    check_positive(top, "--top")
    checkpointer = inv.checkpointer()
    space = run_sync(checkpointer.aspace())
    namespaces, largest = summarize(space.threads, top=top)
    stats: dict[str, Any] = {
        "store": inv.shown_db,
        "kind": checkpointer.capabilities.kind or type(checkpointer).__name__,
        "threads": sum(n.threads for n in namespaces),
        "checkpoints": sum(n.checkpoints for n in namespaces),
        "namespaces": [
            {"namespace": n.namespace, "threads": n.threads, "checkpoints": n.checkpoints, "bytes": n.bytes}
            for n in namespaces
        ],
        "largest_threads": [
            {"thread_id": t.thread_id, "namespace": t.namespace, "checkpoints": t.checkpoints, "bytes": t.bytes}
            for t in largest
        ],
        "bytes": checkpointer.disk_bytes(),
        "dead": _dead(space.dead),
    }
    retention = checkpointer.get_stored_retention()  # the stored policy (plait db retention)
    stats["retention"] = None if retention is None else retention.to_json()
    out = inv.out
    if out.json:
        out.emit(stats)
        return
    from plait.cli.retention import describe_policy

    for key in ("store", "kind", "threads", "checkpoints"):
        out.line(f"{key}: {stats[key]}")
    out.line(f"bytes: {human_size(stats['bytes'])}")
    out.line(f"retention: {describe_policy(retention)}")
    if space.dead is not None:
        about = "about " if space.dead.estimated else ""
        rows = f" in {space.dead.rows} dead rows" if space.dead.rows is not None else ""
        out.line(f"dead: {about}{human_size(space.dead.bytes)}{rows} ({space.dead.reclaim})")
    out.table(
        "namespaces:",
        ["NAMESPACE", "THREADS", "CHECKPOINTS", "BYTES"],
        [[n.namespace or "''", n.threads, n.checkpoints, human_size(n.bytes)] for n in namespaces],
    )
    out.table(
        f"largest threads (top {top}):",
        ["THREAD", "NAMESPACE", "CHECKPOINTS", "BYTES"],
        [[t.thread_id, t.namespace or "''", t.checkpoints, human_size(t.bytes)] for t in largest],
    )


def cmd_db_vacuum(inv: Invocation) -> None:
    """Rewrite the store without its free space, where a rewrite helps (SQLite: ``VACUUM``;
    PostgreSQL: ``VACUUM (ANALYZE)`` of the checkpoint tables; the file store and memory have
    nothing to rewrite)."""
    checkpointer = inv.checkpointer()
    before = checkpointer.disk_bytes()
    freed = checkpointer.reclaim_space(full=True)
    after = checkpointer.disk_bytes()
    record = {"store": inv.shown_db, "bytes_before": before, "bytes_after": after, "bytes_freed": freed}
    if inv.out.json:
        inv.out.emit(record)
        return
    sizes = "" if before is None or after is None else f": {human_size(before)} -> {human_size(after)}"
    inv.out.line(f"vacuumed {inv.shown_db}{sizes} ({human_size(freed)} freed)")
