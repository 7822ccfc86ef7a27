"""The ``plait`` commands on a store's threads: ``threads``, ``history``, ``state``, ``diff``,
``fork`` and ``delete``.

Checkpoints hold their values whole, so these read (and copy, and delete) them directly and
need no graph; only ``fork --set`` folds edits through a graph's reducers (``--graph``).
"""

import json
import time
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.fork import fork_checkpoint
from plait.checkpoint.model import STATUSES, Status, ThreadInfo
from plait.cli.arguments import (
    check_positive,
    confirm,
    parse_keys,
    parse_metadata,
    parse_sets,
    parse_since,
    plural,
)
from plait.cli.context import Invocation, run_command
from plait.cli.options import Checkpoint as CheckpointOpt
from plait.cli.options import Db, Debug, Json, Namespace, Sets, Step, Thread, Yes
from plait.cli.selection import find_checkpoint, short_ids
from plait.errors import ArgumentError, CheckpointNotFoundError, ThreadExistsError
from plait.inspect import ChannelDiff, diff_channel, diff_threads, stored_errors
from plait.inspect_json import checkpoint_json, ref_json, thread_diff_json, thread_json

__all__ = [
    "THREAD_COLUMNS",
    "cmd_delete",
    "cmd_diff",
    "cmd_fork",
    "cmd_history",
    "cmd_state",
    "cmd_threads",
    "list_threads",
    "register",
]

THREAD_COLUMNS = ("thread", "status", "namespace", "step", "checkpoints", "last", "updated", "head")
"""The columns of ``plait threads`` (``updated``: when the thread last came to rest or was
taken by a run, the order of the listing)."""

PAGE = 200
"""Threads read from the store per page while ``--since`` looks for the first older one."""


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def thread_row(t: ThreadInfo, width: int) -> list[Any]:
    """One row of the threads table (in :data:`THREAD_COLUMNS` order)."""
    return [
        t.thread_id,
        t.status,
        t.namespace or "-",
        t.step,
        t.checkpoints,
        t.source,
        _when(t.updated_at),
        t.head_id[:width],
    ]


def cmd_threads(
    inv: Invocation,
    namespace: str | None,
    status: str | None,
    limit: int | None,
    since: float | None,
    metadata: dict[str, Any] | None = None,
    *,
    namespaces: bool = False,
) -> None:
    check_positive(limit, "--limit")
    if status is not None and status not in STATUSES:
        raise ArgumentError("--status", f"--status is one of {', '.join(STATUSES)}; got {status!r}")
    threads = list_threads(inv.checkpointer(), namespace, status, limit, since, metadata, namespaces=namespaces)
    out = inv.out
    if out.json:
        out.emit([thread_json(t) for t in threads])
        return
    if not threads:
        only = [f"namespace {namespace!r}"] if namespace else []
        only += [f"status {status}"] if status else []
        only += [f"since {_when(since)}"] if since is not None else []
        only += [f"metadata {k}={json.dumps(v)}" for k, v in (metadata or {}).items()]
        out.line(f"no threads in {inv.shown_db}" + (f" ({', '.join(only)})" if only else ""))
        return
    width = short_ids([t.head_id for t in threads])
    out.table("threads (most recently active first)", THREAD_COLUMNS, [thread_row(t, width) for t in threads])


def list_threads(
    checkpointer: Checkpointer,
    namespace: str | None,
    status: "Status | None",
    limit: int | None,
    since: float | None,
    metadata: Mapping[str, Any] | None = None,
    *,
    namespaces: bool = False,
) -> list[ThreadInfo]:
    """Threads newest first, filtered (by namespace, status and the head's metadata) and
    paged in the store; with ``since``, page on until the first thread that last moved
    before it (the listing is ordered by that time). With ``namespaces``, each thread is
    followed by its subgraphs' stored runs (child namespaces), each listed once."""
    if namespaces:  # each thread followed by its subgraphs' stored runs
        from plait.checkpoint.retention import group_threads
        from plait.engine.subgraph import subgraph_threads

        listed = list_threads(checkpointer, namespace, None, limit, since, metadata)
        owners = group_threads(listed)  # a subgraph's own row comes after its owner, not on its own
        seen: set[tuple[str, str]] = set()
        out: list[ThreadInfo] = []
        for info in (i for i in listed if (i.namespace, i.thread_id) in owners):
            for t in [info, *run_sync(subgraph_threads(checkpointer, info.thread_id, info.namespace))]:
                if (t.namespace, t.thread_id) not in seen and (status is None or t.status == status):
                    seen.add((t.namespace, t.thread_id))
                    out.append(t)
        return out
    kw: dict[str, Any] = {"namespace": namespace, "status": status, "metadata": metadata}
    if since is None:
        return run_sync(checkpointer.alist_threads(limit=limit, **kw))
    found: list[ThreadInfo] = []
    before: str | None = None
    while True:
        page = run_sync(checkpointer.alist_threads(limit=PAGE, before=before, **kw))
        for t in page:
            if t.updated_at < since or (limit is not None and len(found) >= limit):
                return found
            found.append(t)
        if len(page) < PAGE:
            return found
        before = page[-1].cursor


def cmd_history(
    inv: Invocation, thread: str, limit: int | None, namespace: str, values: bool, keys: list[str] | None
) -> None:
    check_positive(limit, "--limit")
    if values and keys is not None:
        raise ArgumentError("--keys", "give --values (every channel) or --keys (some), not both")
    checkpointer = inv.checkpointer()
    cps = run_sync(checkpointer.ahistory(thread, namespace=namespace, limit=limit))
    if not cps:
        raise CheckpointNotFoundError(thread, None, namespace)
    children = [_children(checkpointer, cp) for cp in cps]
    out = inv.out
    if out.json:
        shown: bool | list[str] = True if values else (keys if keys is not None else False)
        out.emit([_with_children(checkpoint_json(cp, values=shown), c) for cp, c in zip(cps, children, strict=True)])
        return
    width = short_ids([cp.id for cp in cps])
    rows = []
    for cp, below in zip(cps, children, strict=True):
        writes = cp.metadata.get("writes") or {}
        wrote = "; ".join(f"{node}: {', '.join(keys)}" for node, keys in writes.items())
        nxt = ", ".join(dict.fromkeys(t.node for t in cp.next_tasks)) or "-"
        row = [cp.step, cp.id[:width], cp.metadata.get("source", ""), wrote or "-", nxt, _when(cp.created_at)]
        rows.append([*row, ", ".join(below) or "-"] if any(children) else row)
    columns = ["step", "checkpoint", "source", "writes", "next", "at", *(["subgraphs"] if any(children) else [])]
    out.table(f"history of {thread} (newest first)", columns, rows)


def _children(checkpointer: Checkpointer, cp: Any) -> list[str]:
    """The namespaces of the subgraph runs ``cp``'s next tasks stored (where to look with
    ``--namespace``)."""
    from plait.engine.subgraph import stored_children  # the engine, only for a listing that asks

    return [child.namespace for child in run_sync(stored_children(checkpointer, cp))]


def _with_children(record: dict[str, Any], children: list[str]) -> dict[str, Any]:
    return {**record, "subgraphs": children} if children else record


def cmd_state(
    inv: Invocation, thread: str, checkpoint: str | None, step: int | None, key: str | None, namespace: str
) -> None:
    checkpointer = inv.checkpointer()
    cp = find_checkpoint(checkpointer, thread, namespace, checkpoint, step)
    info = run_sync(checkpointer.aget_thread(thread, namespace=namespace))
    errors = stored_errors(cp.pending_writes) if cp.pending_writes else []
    below = _children(checkpointer, cp)
    record = {**checkpoint_json(cp), "status": info.status if info is not None else "idle", "errors": errors}
    record = _with_children(record, below)
    out = inv.out
    if key is not None:
        if key not in cp.values:
            known = ", ".join(sorted(cp.values)) or "(none)"
            raise ArgumentError("--key", f"no key {key!r} in the state of {thread!r}; the keys are: {known}")
        if out.json:
            out.emit(cp.values[key])
        else:
            out.value(key, cp.values[key])
        return
    if out.json:
        out.emit(record)
        return
    out.line(f"thread {thread}  step {cp.step}  checkpoint {cp.id}  ({record['source']})")
    out.line(f"status: {record['status']}")
    out.line(f"next: {', '.join(record['next']) or '(finished)'}")
    for e in errors:
        out.line(f"error: {_error_line(e)}")
    for i in record["interrupts"]:
        out.value(f"waiting for input: interrupt {i['id']} in node {i['node']!r}", i["value"])
    if below:
        out.line(f"subgraphs: {', '.join(below)} (plait state {thread} --namespace NS)")
    out.value("values", cp.values)


def _error_line(error: Mapping[str, Any]) -> str:
    """A stored failure in one line: which node and what it said (the traceback is in
    ``--json``; the step is the checkpoint's, printed above it)."""
    where = f"node {error['node']!r}" if error.get("node") else "the step"
    kind = str(error.get("type") or error.get("error") or "error").rpartition(".")[2]
    return f"{where} failed: {kind}: {error.get('message', '')}"


def cmd_diff(inv: Invocation, a: str, b: str, namespace: str) -> None:
    """Where two threads part ways: compared step by step along their newest lineage."""
    d = run_sync(diff_threads(inv.checkpointer(), a, b, namespace=namespace))
    first, keys, heads = d.first_step, d.keys, d.heads
    out = inv.out
    if out.json:
        out.emit(thread_diff_json(d))
        return
    if first is None:
        out.line(f"{a} and {b} hold the same state")
        return
    out.line(f"{a} and {b} part ways at step {first}, on: {', '.join(keys)}")
    out.line(f"heads: {a} step {d.head_a.step}, {b} step {d.head_b.step}")
    for k, v in heads.added.items():
        out.value(f"+ {k} (only in {b})", v)
    for k, v in heads.removed.items():
        out.value(f"- {k} (only in {a})", v)
    for c in heads.changed:
        channel = diff_channel(c.key, c.before, c.after)
        if channel is not None:
            for title, value in _channel_lines(channel, {a: c.before, b: c.after}):
                out.value(title, value)


def _channel_lines(c: ChannelDiff, both: dict[str, Any]) -> list[tuple[str, Any]]:
    """What differs in one channel held by both heads, as ``(title, value)`` pairs: of a list,
    the items one side has and the other has not (a long chat that forked shows where, not
    all of it twice); of a mapping, its entries that differ; else both values (``both``:
    each thread's value by its id)."""
    key = c.key
    a, b = both
    if c.kind in ("list", "messages"):
        noun = "messages" if c.kind == "messages" else "items"
        lines: list[tuple[str, Any]] = []
        if c.removed_items:
            lines.append((f"~ {key}: {plural(len(c.removed_items), noun[:-1])} only in {a}", list(c.removed_items)))
        if c.appended:
            lines.append((f"~ {key}: {plural(len(c.appended), noun[:-1])} only in {b}", list(c.appended)))
        if c.updated:
            changed = [{a: before, b: after} for before, after in c.updated]
            lines.append((f"~ {key}: {plural(len(c.updated), 'message')} with one id and different content", changed))
        return lines or [(f"~ {key}: the same {noun} in another order", both)]
    if c.kind == "map":
        lines = []
        if c.added_keys:
            lines.append((f"~ {key}: entries only in {b}", dict(c.added_keys)))
        if c.removed_keys:
            lines.append((f"~ {key}: entries only in {a}", dict(c.removed_keys)))
        if c.changed_keys:
            lines.append(
                (f"~ {key}: entries that differ", {k: {a: old, b: new} for k, (old, new) in c.changed_keys.items()})
            )
        return lines
    return [(f"~ {key}", both)]


def cmd_fork(
    inv: Invocation,
    thread: str,
    to: str,
    *,
    checkpoint: str | None,
    step: int | None,
    sets: list[tuple[str, Any]],
    graph: str | None,
    namespace: str,
) -> None:
    inv.namespace = namespace
    if sets and graph is None:
        raise ArgumentError(
            "--graph", "fork --set folds the edits through the graph's reducers: pass --graph MODULE:GRAPH"
        )
    checkpointer = inv.checkpointer()
    source = find_checkpoint(checkpointer, thread, namespace, checkpoint, step)
    if run_sync(checkpointer.aget(to, namespace=namespace)) is not None:
        raise ThreadExistsError(to, namespace, "Fork into a new thread id, or delete it first: plait delete " + to)
    if graph is not None:
        app = inv.graph(graph, namespace=namespace, checkpointer=checkpointer)
        cid = app.fork(thread, to, checkpoint_id=source.id, edits=sets)
    else:
        cid = run_sync(fork_checkpoint(checkpointer, source, to))
    out = inv.out
    if out.json:
        out.emit(
            {
                "thread_id": to,
                "namespace": namespace,
                "checkpoint_id": cid,
                "step": source.step,
                "forked_from": ref_json(source),
            }
        )
    else:
        out.line(f"forked {thread} at step {source.step} (checkpoint {source.id}) into {to} (checkpoint {cid})")
        target = graph or "MODULE:GRAPH"
        out.line(f"continue it with: plait resume {target} {to}{inv.flags()}")


def cmd_delete(inv: Invocation, thread: str, namespace: str, yes: bool) -> None:
    checkpointer = inv.checkpointer()
    info = _thread_info(checkpointer, thread, namespace)
    where = f" in namespace {namespace!r}" if namespace else ""
    confirm(
        f"delete thread {thread!r}{where} and its {plural(info.checkpoints, 'checkpoint')} from {inv.shown_db}?",
        f"delete {thread}",
        yes,
    )
    run_sync(checkpointer.adelete_thread(thread, namespace=namespace))
    if inv.out.json:
        inv.out.emit({"thread_id": thread, "namespace": namespace, "deleted": True, "checkpoints": info.checkpoints})
    else:
        inv.out.line(f"deleted {thread}{where}: {plural(info.checkpoints, 'checkpoint')}")


def _thread_info(checkpointer: Checkpointer, thread: str, namespace: str) -> ThreadInfo:
    for t in run_sync(checkpointer.alist_threads(namespace=namespace)):
        if t.thread_id == thread:
            return t
    raise CheckpointNotFoundError(thread, None, namespace)


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The commands on a store's threads."""

    @app.command()
    def threads(
        db: Db = None,
        namespace: Annotated[
            str | None, typer.Option("--namespace", metavar="NS", help="Only this namespace (default: all).")
        ] = None,
        status: Annotated[
            str | None,
            typer.Option(
                "--status",
                metavar="STATUS",
                help="Only threads that stand so: idle, interrupted, error, busy, ready or stale.",
            ),
        ] = None,
        limit: Annotated[int | None, typer.Option("--limit", "-n", metavar="N", help="At most N threads.")] = None,
        since: Annotated[
            str | None,
            typer.Option(
                "--since",
                metavar="WHEN",
                help="Only threads that moved since WHEN: a span back from now (15m, 2h, 7d) or an ISO 8601 time.",
            ),
        ] = None,
        metadata: Annotated[
            list[str] | None,
            typer.Option(
                "--metadata",
                "-m",
                metavar="KEY=VALUE",
                help="Only threads whose head's metadata holds KEY with VALUE (JSON, else text: user=ada, n=1, "
                "run='{\"attempt\": 2}' matches by containment); repeat for more keys.",
            ),
        ] = None,
        namespaces: Annotated[
            bool,
            typer.Option(
                "--namespaces",
                help="Follow each thread with its subgraphs' stored runs (their child namespaces, node:task_id).",
            ),
        ] = False,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List the threads in a store with how each stands, most recently active first."""
        run_command(
            lambda inv: cmd_threads(
                inv, namespace, status, limit, parse_since(since), parse_metadata(metadata), namespaces=namespaces
            ),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @app.command()
    def history(
        thread: Thread,
        limit: Annotated[int | None, typer.Option("--limit", "-n", metavar="N", help="At most N checkpoints.")] = None,
        values: Annotated[
            bool, typer.Option("--values", metavar="", help="With --json: every checkpoint's values.")
        ] = False,
        keys: Annotated[
            str | None,
            typer.Option("--keys", "-k", metavar="KEYS", help="With --json: these channels' values (a,b)."),
        ] = None,
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """A thread's checkpoints, newest first (--json: metadata only, unless --values or --keys)."""
        run_command(
            lambda inv: cmd_history(inv, thread, limit, namespace, values, parse_keys(keys)),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @app.command()
    def state(
        thread: Thread,
        checkpoint: CheckpointOpt = None,
        step: Step = None,
        key: Annotated[
            str | None, typer.Option("--key", "-k", metavar="KEY", help="Only this channel's value.")
        ] = None,
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """A thread's state: the head's, or at --checkpoint or --step."""
        run_command(
            lambda inv: cmd_state(inv, thread, checkpoint, step, key, namespace), as_json=as_json, debug=debug, db=db
        )

    @app.command("diff")
    def diff_cmd(
        a: Annotated[str, typer.Argument(metavar="THREAD_A", help="The first thread.", show_default=False)],
        b: Annotated[str, typer.Argument(metavar="THREAD_B", help="The second thread.", show_default=False)],
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Where two threads part ways, and how their heads differ."""
        run_command(lambda inv: cmd_diff(inv, a, b, namespace), as_json=as_json, debug=debug, db=db)

    @app.command()
    def fork(
        thread: Thread,
        to: Annotated[str, typer.Option("--to", metavar="NEW", help="The new thread's id.", show_default=False)],
        checkpoint: CheckpointOpt = None,
        step: Step = None,
        set_: Sets = None,
        graph: Annotated[
            str | None,
            typer.Option(
                "--graph", "-g", metavar="MODULE:GRAPH", help="The graph whose reducers fold --set (needed with it)."
            ),
        ] = None,
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Copy a checkpoint into a new thread, optionally with edits folded through the reducers."""
        run_command(
            lambda inv: cmd_fork(
                inv,
                thread,
                to,
                checkpoint=checkpoint,
                step=step,
                sets=parse_sets(set_ or []),
                graph=graph,
                namespace=namespace,
            ),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @app.command()
    def delete(
        thread: Thread,
        yes: Yes = False,
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Delete a thread and all its checkpoints (asks first; --yes for scripts)."""
        run_command(lambda inv: cmd_delete(inv, thread, namespace, yes), as_json=as_json, debug=debug, db=db)
