"""``plait export`` and ``plait import``: a thread moved between stores as JSON lines.

The format (``plait-thread``, version 1), one JSON value per line, UTF-8::

    {"checkpoints": 3, "format": "plait-thread", "namespace": "", "thread_id": "t1", "version": 1}
    {"barriers": {...}, "checkpoint_id": "...", "created_at": 1733050000.123456, "metadata": {...},
     "next_tasks": [...], "parent_id": null, "pending_writes": [...], "step": 0, "values": {...},
     "versions": {...}}
    ...

The header comes first; then every checkpoint of the thread's history, oldest first, so each
parent comes before its children: its id and parent, step, creation time (unix seconds, the
number as stored), channel values and versions, the tasks planned next (``[task_id, node]``,
or ``[task_id, node, true, arg]`` for a Send), join barriers, metadata, and its pending writes
(``[task_id, kind, key, value]``: finished results, recorded effects, resume values,
interrupts). Nothing else is needed to go on with the thread in another store. Object keys
are sorted (JSON objects are unordered, and stores differ in the order they give channels
back), so a thread exports to the same bytes from every store, and exporting what was
imported gives the bytes that were imported.

Only the public checkpointer API is used (``ahistory`` and ``aget`` to read, one ``acommit``
to write), so any backend can be on either side. An import is one commit, fenced to a thread
that does not exist yet: all of it lands or none, and a thread that exists is refused unless
``--replace`` deletes it first.

What is not carried: checkpoints off the head's lineage (branches left by time travel), which
the checkpointer API cannot list; ``export`` says how many there are. The thread's lease is
run coordination, not data, and is not carried either.
"""

import sys
import uuid
from collections.abc import Iterator, Mapping
from typing import IO, Annotated, Any

import orjson
import typer

from plait._codec import freeze, freeze_trusted
from plait._sync import run_sync
from plait._version import __version__
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Fence, PendingWrite, Task, WritesBatch
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, Namespace, Thread
from plait.cli.output import note
from plait.errors import (
    ArgumentError,
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    ExportFormatError,
    StateError,
    ThreadExistsError,
)

__all__ = ["FORMAT", "VERSION", "cmd_export", "cmd_import", "export_lines", "register"]

FORMAT = "plait-thread"
VERSION = 1
_FIELDS = (
    "checkpoint_id",
    "parent_id",
    "step",
    "created_at",
    "values",
    "versions",
    "next_tasks",
    "barriers",
    "metadata",
    "pending_writes",
)


def export_lines(inv: Invocation, thread: str, namespace: str) -> Iterator[bytes]:
    """The export of ``thread``, line by line (each without its newline)."""
    checkpointer = inv.checkpointer()
    history = list(reversed(run_sync(checkpointer.ahistory(thread, namespace=namespace))))
    if not history:
        raise CheckpointNotFoundError(thread, None, namespace)
    total = next(
        (t.checkpoints for t in run_sync(checkpointer.alist_threads(namespace=namespace)) if t.thread_id == thread),
        len(history),
    )
    if total > len(history):
        note(
            f"note: thread {thread!r} has {total - len(history)} checkpoints off its head's lineage (branches left by "
            "time travel); the checkpointer API cannot list them, so they are not exported"
        )
    yield orjson.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "thread_id": thread,
            "namespace": namespace,
            "checkpoints": len(history),
        },
        option=orjson.OPT_SORT_KEYS,
    )
    for cp in history:
        full = run_sync(checkpointer.aget(thread, cp.id, namespace=namespace))
        pending = full.pending_writes if full is not None else ()
        yield orjson.dumps(
            {
                "checkpoint_id": cp.id,
                "parent_id": cp.parent_id,
                "step": cp.step,
                "created_at": cp.created_at,
                "values": cp.values,
                "versions": cp.versions,
                "next_tasks": [t.to_json() for t in cp.next_tasks],
                "barriers": {k: list(v) for k, v in cp.barriers.items()},
                "metadata": cp.metadata,
                "pending_writes": [w.to_json() for w in pending],
            },
            option=orjson.OPT_SORT_KEYS,
        )


def cmd_export(inv: Invocation, thread: str, namespace: str, output: str | None) -> None:
    inv.namespace = namespace
    lines = export_lines(inv, thread, namespace)
    if output is None:
        for line in lines:
            inv.out.text(line.decode() + "\n")
        return
    count = -1
    with open(output, "wb") as f:
        for line in lines:
            f.write(line + b"\n")
            count += 1
    if inv.out.json:
        inv.out.emit({"thread_id": thread, "namespace": namespace, "checkpoints": count, "path": output})
    else:
        inv.out.line(f"exported {thread}: {count} checkpoints to {output}")


def _read(source: IO[bytes], name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and checkpoint records of an export, checked line by line."""
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(source, start=1):
        if not raw.strip():
            continue
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ExportFormatError(name, number, f"not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise ExportFormatError(name, number, "not a JSON object")
        if header is None:
            if item.get("format") != FORMAT:
                raise ExportFormatError(name, number, "no plait-thread header")
            if item.get("version") != VERSION:
                raise ExportFormatError(
                    name, number, f"format version {item.get('version')!r}, this plait ({__version__}) reads {VERSION}"
                )
            if not isinstance(item.get("thread_id"), str) or not isinstance(item.get("namespace"), str):
                raise ExportFormatError(name, number, "the header names no thread_id and namespace")
            header = item
            continue
        missing = [f for f in _FIELDS if f not in item]
        if missing:
            raise ExportFormatError(name, number, f"a checkpoint without {', '.join(missing)}")
        item["_line"] = number
        records.append(item)
    if header is None:
        raise ExportFormatError(name, 1, "the file is empty")
    if len(records) != header.get("checkpoints"):
        raise ExportFormatError(
            name,
            number if records else 1,
            f"the header says {header.get('checkpoints')} checkpoints, the file has {len(records)}",
        )
    return header, records


def _checkpoint(rec: Mapping[str, Any], thread: str, namespace: str, name: str) -> Checkpoint:
    line = rec["_line"]
    try:
        values = rec["values"]
        return Checkpoint(
            thread_id=thread,
            namespace=namespace,
            id=str(rec["checkpoint_id"]),
            parent_id=None if rec["parent_id"] is None else str(rec["parent_id"]),
            step=int(rec["step"]),
            values={str(k): freeze(v, str(k)) for k, v in values.items()},
            versions={str(k): int(v) for k, v in rec["versions"].items()},
            next_tasks=tuple(Task.from_json(t) for t in rec["next_tasks"]),
            barriers={str(k): tuple(v) for k, v in rec["barriers"].items()},
            metadata=freeze_trusted(rec["metadata"]),
            created_at=float(rec["created_at"]),
        )
    except (AttributeError, KeyError, TypeError, ValueError, IndexError, StateError) as exc:
        raise ExportFormatError(name, line, f"a checkpoint of the wrong shape ({exc})") from None


def _writes(rec: Mapping[str, Any], name: str) -> tuple[PendingWrite, ...]:
    try:
        return tuple(
            PendingWrite(task_id=str(w[0]), kind=w[1], key=str(w[2]), value=freeze_trusted(w[3]))
            for w in rec["pending_writes"]
        )
    except (TypeError, IndexError, KeyError) as exc:
        raise ExportFormatError(name, rec["_line"], f"pending writes of the wrong shape ({exc})") from None


def cmd_import(inv: Invocation, source: str, thread: str | None, namespace: str | None, replace: bool) -> None:
    name = "stdin" if source == "-" else source
    try:
        if source == "-":
            header, records = _read(sys.stdin.buffer, name)
        else:
            with open(source, "rb") as f:
                header, records = _read(f, name)
    except FileNotFoundError:
        raise ArgumentError("FILE", f"no such file: {source!r} (plait import reads what plait export wrote)") from None
    target = thread or header["thread_id"]
    ns = header["namespace"] if namespace is None else namespace
    inv.namespace = ns
    cps = [_checkpoint(r, target, ns, name) for r in records]
    by_id = {cp.id: cp for cp in cps}
    writes: list[CheckpointWrite] = []
    batches: list[WritesBatch] = []
    for cp, rec in zip(cps, records, strict=True):
        parent = by_id.get(cp.parent_id) if cp.parent_id is not None else None
        if cp.parent_id is not None and parent is None:
            raise ExportFormatError(
                name, rec["_line"], f"checkpoint {cp.id} names a parent {cp.parent_id} that comes before it nowhere"
            )
        changed = {k for k, v in cp.values.items() if parent is None or k not in parent.values or parent.values[k] != v}
        writes.append(CheckpointWrite(checkpoint=cp, changed=frozenset(changed)))
        pending = _writes(rec, name)
        if pending:
            batches.append(WritesBatch(thread_id=target, namespace=ns, checkpoint_id=cp.id, writes=pending))
    checkpointer = inv.checkpointer(create=True)
    exists = run_sync(checkpointer.aget(target, namespace=ns)) is not None
    if exists and not replace:
        raise ThreadExistsError(
            target, ns, f"Import it under another id (--thread NEW), or replace it: plait import {source} --replace"
        )
    if exists:
        run_sync(checkpointer.adelete_thread(target, namespace=ns))
    try:
        run_sync(
            checkpointer.acommit(
                checkpoints=writes, writes=batches, fence=Fence(owner=f"import:{uuid.uuid4().hex}", expect_head=None)
            )
        )
    except ConcurrentUpdateError:
        raise ThreadExistsError(
            target, ns, "Another process wrote to it while importing; nothing was imported."
        ) from None
    head = cps[-1].id if cps else None
    summary = {
        "thread_id": target,
        "namespace": ns,
        "checkpoint_id": head,
        "checkpoints": len(cps),
        "pending_writes": sum(len(b.writes) for b in batches),
        "replaced": exists,
    }
    if inv.out.json:
        inv.out.emit(summary)
    else:
        where = f" (namespace {ns!r})" if ns else ""
        verb = "replaced" if exists else "imported"
        inv.out.line(f"{verb} {target}{where}: {len(cps)} checkpoints, {summary['pending_writes']} pending writes")


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """``export`` and ``import``."""

    @app.command("export")
    def export_cmd(
        thread: Thread,
        output: Annotated[
            str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE (default: stdout).")
        ] = None,
        db: Db = None,
        namespace: Namespace = "",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Write a thread (every checkpoint, its metadata and pending writes) as JSON lines."""
        run_command(lambda inv: cmd_export(inv, thread, namespace, output), as_json=as_json, debug=debug, db=db)

    @app.command("import")
    def import_cmd(
        file: Annotated[
            str, typer.Argument(metavar="FILE", help="What plait export wrote (- for stdin).", show_default=False)
        ],
        thread: Annotated[
            str | None,
            typer.Option("--thread", "-t", metavar="THREAD", help="Import under this id (default: the exported one)."),
        ] = None,
        namespace: Annotated[
            str | None,
            typer.Option("--namespace", metavar="NS", help="Import into this namespace (default: the exported one)."),
        ] = None,
        replace: Annotated[
            bool, typer.Option("--replace", metavar="", help="Delete a thread of that id first, if there is one.")
        ] = False,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Read a thread written by plait export into the store, as one commit."""
        run_command(lambda inv: cmd_import(inv, file, thread, namespace, replace), as_json=as_json, debug=debug, db=db)
