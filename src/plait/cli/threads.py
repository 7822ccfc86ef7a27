"""The ``plait`` commands that work on a store's threads and need no graph: ``threads``,
``history``, ``state``, ``diff``, ``fork`` (without ``--set``).

Checkpoints hold their values whole, so these read (and copy, and prune) them directly.
"""

import time
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from plait._sync import run_sync
from plait.checkpoint.base import Checkpoint, Checkpointer, ThreadInfo
from plait.checkpoint.fork import fork_checkpoint
from plait.cli.arguments import DEFAULT_DB, parse_sets
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, Ns, Sets
from plait.cli.output import Out, UsageError
from plait.errors import CheckpointNotFoundError
from plait.state.diff import StateDiff, diff

__all__ = [
    "checkpoint_json",
    "cmd_diff",
    "cmd_fork",
    "cmd_history",
    "cmd_state",
    "cmd_threads",
    "copy_checkpoint",
    "register",
    "thread_diff",
    "thread_json",
]


def cmd_threads(store: Checkpointer, namespace: str | None, out: Out) -> None:
    threads = run_sync(store.alist_threads(namespace=namespace))
    if out.json:
        out.emit([thread_json(t) for t in threads])
        return
    if not threads:
        out.line("no threads")
        return
    rows = [
        [t.thread_id, t.namespace or "-", t.step, t.checkpoints, t.source, _when(t.created_at), t.head_id]
        for t in threads
    ]
    out.table("threads (newest first)", ["thread", "namespace", "step", "checkpoints", "last", "updated", "head"], rows)


def thread_json(t: ThreadInfo) -> dict[str, Any]:
    return {
        "thread_id": t.thread_id,
        "namespace": t.namespace,
        "head_id": t.head_id,
        "step": t.step,
        "checkpoints": t.checkpoints,
        "source": t.source,
        "created_at": t.created_at,
    }


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def checkpoint_json(cp: Checkpoint, *, values: bool = True) -> dict[str, Any]:
    from plait.graph.records import ThreadState

    data = ThreadState.of(cp).to_json()
    if not values:
        data.pop("values")
    return data


def _get(store: Checkpointer, thread: str, checkpoint: str | None, namespace: str) -> Checkpoint:
    cp = run_sync(store.aget(thread, checkpoint, namespace=namespace))
    if cp is None:
        raise CheckpointNotFoundError(thread, checkpoint, namespace)
    return cp


def cmd_history(store: Checkpointer, thread: str, limit: int | None, namespace: str, out: Out) -> None:
    cps = run_sync(store.ahistory(thread, namespace=namespace, limit=limit))
    if not cps:
        raise CheckpointNotFoundError(thread, None, namespace)
    if out.json:
        out.emit([checkpoint_json(cp) for cp in cps])
        return
    rows = []
    for cp in cps:
        writes = cp.metadata.get("writes") or {}
        wrote = "; ".join(f"{node}: {', '.join(keys)}" for node, keys in writes.items())
        nxt = ", ".join(dict.fromkeys(t.node for t in cp.next_tasks)) or "-"
        rows.append([cp.step, cp.id, cp.metadata.get("source", ""), wrote or "-", nxt, _when(cp.created_at)])
    out.table(f"history of {thread} (newest first)", ["step", "checkpoint", "source", "writes", "next", "at"], rows)


def cmd_state(
    store: Checkpointer, thread: str, checkpoint: str | None, key: str | None, namespace: str, out: Out
) -> None:
    from plait.graph.records import ThreadState

    cp = _get(store, thread, checkpoint, namespace)
    state = ThreadState.of(cp)
    if key is not None:
        if key not in state.values:
            known = ", ".join(sorted(state.values)) or "(none)"
            raise UsageError(f"no key {key!r} in the state of {thread!r}; the keys are: {known}")
        if out.json:
            out.emit(state.values[key])
        else:
            out.value(key, state.values[key])
        return
    if out.json:
        out.emit(state.to_json())
        return
    out.line(f"thread {thread}  step {state.step}  checkpoint {state.checkpoint_id}  ({state.source})")
    out.line(f"next: {', '.join(state.next) or '(finished)'}")
    for i in state.interrupts:
        out.value(f"waiting for input: interrupt {i.id} in node {i.node!r}", i.value)
    out.value("values", state.values)


@dataclass(frozen=True, slots=True)
class _ThreadDiff:
    first_step: int | None
    keys: tuple[str, ...]
    heads: StateDiff
    head_a: Checkpoint
    head_b: Checkpoint


def thread_diff(store: Checkpointer, a: str, b: str, namespace: str) -> _ThreadDiff:
    """Where two threads part ways: compared step by step along their newest lineage."""
    ha = list(reversed(run_sync(store.ahistory(a, namespace=namespace))))
    hb = list(reversed(run_sync(store.ahistory(b, namespace=namespace))))
    if not ha:
        raise CheckpointNotFoundError(a, None, namespace)
    if not hb:
        raise CheckpointNotFoundError(b, None, namespace)
    by_a, by_b = {cp.step: cp for cp in ha}, {cp.step: cp for cp in hb}
    first: int | None = None
    keys: tuple[str, ...] = ()
    for step in sorted(set(by_a) & set(by_b)):
        d = diff(by_a[step].values, by_b[step].values)
        if d:
            first, keys = step, d.keys
            break
    heads = diff(ha[-1].values, hb[-1].values)
    if first is None and heads:
        first, keys = max(ha[-1].step, hb[-1].step), heads.keys
    return _ThreadDiff(first_step=first, keys=keys, heads=heads, head_a=ha[-1], head_b=hb[-1])


def cmd_diff(store: Checkpointer, a: str, b: str, namespace: str, out: Out) -> None:
    d = thread_diff(store, a, b, namespace)
    if out.json:
        out.emit(
            {
                "a": a,
                "b": b,
                "first_step": d.first_step,
                "keys": list(d.keys),
                "heads": d.heads.to_json(),
                "head_a": d.head_a.id,
                "head_b": d.head_b.id,
            }
        )
        return
    if d.first_step is None:
        out.line(f"{a} and {b} hold the same state")
        return
    out.line(f"{a} and {b} part ways at step {d.first_step}, on: {', '.join(d.keys)}")
    out.line(f"heads: {a} step {d.head_a.step}, {b} step {d.head_b.step}")
    for k, v in d.heads.added.items():
        out.value(f"+ {k} (only in {b})", v)
    for k, v in d.heads.removed.items():
        out.value(f"- {k} (only in {a})", v)
    for c in d.heads.changed:
        out.value(f"~ {c.key}", {a: c.before, b: c.after})


def cmd_fork(
    store: Checkpointer,
    thread: str,
    checkpoint: str | None,
    to: str,
    sets: dict[str, Any],
    graph: str | None,
    namespace: str,
    inv: Invocation,
) -> None:
    out = inv.out
    if run_sync(store.aget(to, namespace=namespace)) is not None:
        raise UsageError(f"thread {to!r} already exists; fork into a new thread id")
    source = _get(store, thread, checkpoint, namespace).id
    if sets:
        if graph is None:
            raise UsageError("fork --set folds the edits through the graph's reducers: pass --graph MODULE:GRAPH")
        app = inv.graph(graph)
        cid = app.fork(thread, to, checkpoint_id=checkpoint, edits=sets)
    else:
        cid = copy_checkpoint(store, thread, checkpoint, to, namespace)
    if out.json:
        out.emit({"thread_id": to, "checkpoint_id": cid, "forked_from": {"thread_id": thread, "checkpoint_id": source}})
    else:
        out.line(f"forked {thread} at checkpoint {source} into {to} (new checkpoint {cid})")
        out.line("continue it with: plait resume MODULE:GRAPH " + to)


def copy_checkpoint(store: Checkpointer, thread: str, checkpoint: str | None, to: str, namespace: str) -> str:
    """Copy a checkpoint as the root of a new thread, unchanged (no graph needed)."""
    src = _get(store, thread, checkpoint, namespace)
    return run_sync(fork_checkpoint(store, src, to))


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The commands on a store's threads: ``threads``, ``history``, ``state``, ``diff``, ``fork``."""

    @app.command()
    def threads(
        db: Db = DEFAULT_DB,
        namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace.")] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List the threads in a store, newest first."""
        run_command(lambda inv: cmd_threads(inv.store(), namespace, inv.out), as_json=as_json, debug=debug, db=db)

    @app.command()
    def history(
        thread: str,
        limit: Annotated[int | None, typer.Option("--limit", "-n", help="At most N checkpoints.")] = None,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """A thread's checkpoints, newest first."""
        run_command(
            lambda inv: cmd_history(inv.store(), thread, limit, namespace, inv.out), as_json=as_json, debug=debug, db=db
        )

    @app.command()
    def state(
        thread: str,
        checkpoint: Annotated[str | None, typer.Option("--checkpoint", "-c", help="A checkpoint id.")] = None,
        key: Annotated[str | None, typer.Option("--key", "-k", help="Only this channel.")] = None,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """A thread's state (the latest, or at --checkpoint)."""
        run_command(
            lambda inv: cmd_state(inv.store(), thread, checkpoint, key, namespace, inv.out),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @app.command("diff")
    def diff_cmd(
        a: str,
        b: str,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Where two threads part ways, and how their heads differ."""
        run_command(lambda inv: cmd_diff(inv.store(), a, b, namespace, inv.out), as_json=as_json, debug=debug, db=db)

    @app.command()
    def fork(
        thread: str,
        to: Annotated[str, typer.Option("--to", help="The new thread.")],
        checkpoint: Annotated[str | None, typer.Option("--checkpoint", "-c", help="Fork here (default: head).")] = None,
        set_: Sets = None,
        graph: Annotated[str | None, typer.Option("--graph", help="MODULE:GRAPH, needed with --set.")] = None,
        db: Db = DEFAULT_DB,
        namespace: Ns = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Copy a checkpoint into a new thread, optionally with edits folded through the reducers."""
        run_command(
            lambda inv: cmd_fork(inv.store(), thread, checkpoint, to, parse_sets(set_ or []), graph, namespace, inv),
            as_json=as_json,
            debug=debug,
            db=db,
        )
