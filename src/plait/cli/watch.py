"""``plait watch THREAD``: follow a running thread live, from any process that can read its
store, until it stops.

The store is all there is to watch (the run may be in another process or on another
machine). The command waits on the store's change feed for that thread
(:meth:`~plait.checkpoint.base.Checkpointer.achanges`), and looks at least every
``--interval`` seconds anyway, since a run that dies commits nothing. A look is cheap: one
look-up of the thread's row (:meth:`~plait.checkpoint.base.Checkpointer.aget_thread`: its
status and head id), the new checkpoints read only when the head moved, and the head's
pending writes only while a run holds the thread (they show each task of the running step as
it finishes). It ends when nobody holds the thread any more, with the exit code of how it
stands: 0 idle (finished), 3 interrupted (waiting for input), 1 error, ready or stale (a
task failed, the run stopped before the end, or it died).
"""

import asyncio
from typing import Annotated, Any

import typer

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.feed import ChangeFeed
from plait.checkpoint.model import Checkpoint, ThreadInfo
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, Namespace, Thread
from plait.cli.output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Exit, to_json_text
from plait.errors import ArgumentError, CheckpointNotFoundError
from plait.inspect_json import checkpoint_json, iso

__all__ = ["STOP_CODES", "cmd_watch", "register"]

STOP_CODES = {
    "idle": EXIT_OK,
    "interrupted": EXIT_INTERRUPTED,
    "error": EXIT_FAILED,
    "ready": EXIT_FAILED,
    "stale": EXIT_FAILED,
}
"""The exit code of ``watch`` by how the thread stands when nobody holds it any more."""


PAGE = 16
"""Checkpoints read per page while looking back for the head shown last."""


class _Follower:
    """What has been shown of one thread, and how to show what is new."""

    def __init__(self, inv: Invocation, checkpointer: Checkpointer, thread: str, namespace: str) -> None:
        self.inv, self.checkpointer, self.thread, self.namespace = inv, checkpointer, thread, namespace
        self.head: str | None = None
        self.shown_at = float("-inf")
        """When the newest checkpoint shown was written."""
        self.done_tasks: set[str] = set()

    def emit(self, kind: str, text: str, **fields: Any) -> None:
        if self.inv.out.json:
            record = {"kind": kind, "thread_id": self.thread, "namespace": self.namespace, **fields}
            self.inv.out.text(to_json_text(record, indent=False) + "\n")  # JSON Lines, one as it happens
        else:
            self.inv.out.line(text)

    async def checkpoints(self, info: ThreadInfo) -> None:
        """Show the checkpoints written since the last poll, oldest first."""
        if info.head_id == self.head:
            return
        new: list[Checkpoint] = []
        before: str | None = None
        while True:  # newest first, a page at a time, back to the head shown last
            page = await self.checkpointer.ahistory(self.thread, namespace=self.namespace, limit=PAGE, before=before)
            for cp in page:
                if cp.id == self.head or cp.created_at <= self.shown_at:
                    break  # shown already (a replay's branch stops at what came before it)
                new.append(cp)
                if self.head is None:  # the first poll shows the head only
                    break
            else:
                if len(page) == PAGE:
                    before = page[-1].id
                    continue
            break
        for cp in reversed(new):
            record = checkpoint_json(cp, values=False)
            writes = cp.metadata.get("writes") or {}
            wrote = "; ".join(f"{node}: {', '.join(keys)}" for node, keys in writes.items()) or "-"
            nxt = ", ".join(record["next"]) or "-"
            self.emit(
                "checkpoint",
                f"  step {cp.step}  checkpoint {cp.id} ({record['source']})  wrote {wrote}  next {nxt}",
                checkpoint_id=cp.id,
                step=cp.step,
                source=record["source"],
                writes=writes,
                next=record["next"],
                created_at=record["created_at"],
            )
        self.head = info.head_id
        self.shown_at = max([self.shown_at, *(cp.created_at for cp in new)])
        self.done_tasks = set()

    async def tasks(self) -> None:
        """Show each task of the running step that finished (or failed) since the last poll."""
        cp = await self.checkpointer.aget(self.thread, namespace=self.namespace)
        if cp is None or cp.id != self.head:
            return  # the head moved in between: the next poll shows the checkpoint first
        nodes = {t.id: t.node for t in cp.next_tasks}
        for w in cp.pending_writes:
            if w.kind not in ("result", "error", "interrupt") or w.task_id in self.done_tasks:
                continue
            self.done_tasks.add(w.task_id)
            node = nodes.get(w.task_id) or (w.value.get("node") if isinstance(w.value, dict) else None) or "-"
            what = {"result": "finished", "error": "failed", "interrupt": "paused for input"}[w.kind]
            if w.kind == "error" and isinstance(w.value, dict):
                what += f": {w.value.get('type')}: {w.value.get('message')}"
            self.emit(
                "task",
                f"  step {cp.step + 1}  {node}  {what}",
                node=node,
                task_id=w.task_id,
                step=cp.step + 1,
                event=w.kind,
            )


def cmd_watch(inv: Invocation, thread: str, namespace: str, interval: float) -> None:
    """Follow ``thread`` until nobody holds it, then leave with the code of how it stands."""
    if not interval > 0:
        raise ArgumentError("--interval", f"--interval takes seconds above 0; got {interval:g}")
    checkpointer = inv.checkpointer()
    info = run_sync(_follow(inv, checkpointer, thread, namespace, interval))
    code = STOP_CODES[info.status]
    if code != EXIT_OK:
        raise Exit(code)


async def _follow(
    inv: Invocation, checkpointer: Checkpointer, thread: str, namespace: str, interval: float
) -> ThreadInfo:
    """Show the thread until nobody holds it; how it stands then."""
    async with checkpointer.achanges(namespace=namespace, thread_id=thread) as changes:
        info = await checkpointer.aget_thread(thread, namespace=namespace)
        if info is None:
            raise CheckpointNotFoundError(thread, None, namespace)
        follow = _Follower(inv, checkpointer, thread, namespace)
        holder = f", held by {info.lease.owner}" if info.status == "busy" and info.lease is not None else ""
        follow.emit("watching", f"watching {thread} in {inv.shown_db} ({info.status}{holder})", status=info.status)
        while True:
            await follow.checkpoints(info)
            if info.status != "busy":
                break
            await follow.tasks()
            await _next_change(changes, interval)
            latest = await checkpointer.aget_thread(thread, namespace=namespace)
            if latest is None:
                follow.emit("deleted", f"{thread} was deleted", status=None)
                raise CheckpointNotFoundError(thread, None, namespace)
            info = latest
        await follow.tasks()  # what the last step's tasks left on the head (a failure, an interrupt)
    follow.emit(
        "stopped",
        f"{thread} stopped: {info.status} at step {info.step} ({iso(info.updated_at)})",
        status=info.status,
        checkpoint_id=info.head_id,
        step=info.step,
    )
    return info


async def _next_change(changes: ChangeFeed, interval: float) -> None:
    """Wait for a change of the thread, ``interval`` seconds at most (at once when one came
    since the last look), and take every change reported so far: the look that follows
    covers them all."""
    try:
        if await changes.next(0) is None:
            await changes.next(interval)
        while await changes.next(0) is not None:
            pass
    except Exception:  # the feed broke (it raises again at once): looking every interval is enough
        await asyncio.sleep(interval)


def register(app: typer.Typer) -> None:
    """The ``watch`` command."""

    @app.command()
    def watch(
        thread: Thread,
        interval: Annotated[
            float,
            typer.Option(
                "--interval",
                metavar="SECONDS",
                help="The longest wait between two looks at the store (a change of the thread is shown at once).",
            ),
        ] = 0.5,
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Follow a thread live (new checkpoints, each task as it finishes) until its run stops.

        Exits 0 when the thread finished, 3 when it waits for input, 1 when it failed or its run died.
        """
        run_command(lambda inv: cmd_watch(inv, thread, namespace, interval), as_json=as_json, debug=debug, db=db)
