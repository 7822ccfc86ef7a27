"""The ``plait`` command line: run graphs, and inspect, edit and fork their threads.

Inspection commands (``threads``, ``history``, ``state``, ``diff``, ``db``) open the store
directly and need no graph: checkpoints hold their values whole. Commands that run a graph
or fold writes through its reducers (``run``, ``resume``, ``update``, ``fork --set``) take
``MODULE:GRAPH``, where MODULE is a module name or a ``.py`` file and GRAPH names a
``Graph``, ``Dag`` or ``CompiledGraph``, or a function with no arguments that returns one.

Exit codes: 0 done, 1 the run or the command failed, 2 wrong usage, 3 the run paused and
waits for input (``plait resume``). Errors are one line; ``--debug`` shows the traceback.

typer and rich are imported only here, and only when the command line runs (``pip install
'plait[cli]'``), so ``import plait`` never loads them. The typer application is built in
:func:`build_app`; the commands' work is done by the plain functions around it.
"""

import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

from plait._frozen import thaw
from plait._sync import run_sync
from plait.checkpoint.base import Checkpoint, Checkpointer, CheckpointWrite, ThreadInfo, WritesBatch, new_checkpoint_id
from plait.errors import CheckpointNotFoundError, PlaitError, RunError
from plait.state.diff import StateDiff, diff

if TYPE_CHECKING:
    import typer

    from plait.graph.compiled import CompiledGraph
    from plait.types import Durability

__all__ = ["build_app", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 3
DEFAULT_DB = "plait.db"
INSTALL_HINT = "plait: the command line needs typer and rich: pip install 'plait[cli]'"


class UsageError(Exception):
    """Wrong arguments: exit code 2."""


class Exit(Exception):
    """Leave with ``code`` after the output was written."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# -- output ----------------------------------------------------------------------------------


def to_json_text(value: Any, *, indent: bool = True) -> str:
    return json.dumps(thaw(value), indent=2 if indent else None, ensure_ascii=False, default=str)


@dataclass(slots=True)
class Out:
    """Where a command writes: JSON for scripts, rich on a terminal, plain lines otherwise."""

    json: bool = False
    rich: bool = False

    @classmethod
    def make(cls, as_json: bool) -> "Out":
        rich = not as_json and sys.stdout.isatty() and _installed("rich")
        return cls(json=as_json, rich=rich)

    def emit(self, data: Any) -> None:
        print(to_json_text(data), flush=True)

    def line(self, text: str = "") -> None:
        if self.rich:
            from rich.console import Console

            Console(highlight=False).print(text, markup=False)
        else:
            print(text, flush=True)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if self.rich:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for c in columns:
                table.add_column(c)
            for r in rows:
                table.add_row(*(str(x) for x in r))
            Console().print(table)
            return
        cells = [[str(c) for c in columns], *([str(x) for x in r] for r in rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        print(title)
        for row in cells:
            print("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())

    def value(self, title: str, value: Any) -> None:
        if self.rich:
            from rich.console import Console
            from rich.syntax import Syntax

            Console().print(f"[bold]{title}[/bold]")
            Console().print(Syntax(to_json_text(value), "json", word_wrap=True))
            return
        print(f"{title}:")
        for row in to_json_text(value).splitlines():
            print(f"  {row}")


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise Exit(code)


_OPEN: list[Checkpointer] = []
"""Stores opened by the running command, closed when it ends."""


def guarded(debug: bool, fn: Callable[[], None]) -> None:
    """Run a command body, turning errors into one line and an exit code."""
    try:
        try:
            fn()
        finally:
            while _OPEN:
                run_sync(_OPEN.pop().aclose())
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


# -- arguments -------------------------------------------------------------------------------


def parse_json(text: str, what: str) -> Any:
    """JSON text, or ``@path`` for a file holding it."""
    if text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"{what}: cannot read {text[1:]!r}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON ({exc.msg} at column {exc.colno}): {text!r}") from None


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``key=json`` pairs; a value that is not JSON is taken as a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set takes key=json, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def open_store(db: str, *, create: bool = False) -> Checkpointer:
    """The checkpointer for ``--db``: a SQLite path or a ``postgresql://`` DSN."""
    from plait.graph.compiled import coerce_checkpointer

    if not db.startswith(("postgres://", "postgresql://")) and not create and not os.path.exists(db):
        raise UsageError(f"no database at {db!r}: pass --db PATH (a SQLite file or a postgresql:// DSN)")
    saver = coerce_checkpointer(db)
    assert saver is not None
    _OPEN.append(saver)
    run_sync(saver.setup())
    return saver


def load_target(target: str) -> Any:
    """The object named by ``MODULE:ATTR`` (MODULE may be a ``.py`` file)."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected MODULE:GRAPH (e.g. app.graphs:support or flow.py:graph), got {target!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise UsageError(f"no such file: {module_name!r}")
        name = "_plait_target_" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex[:8]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot load {module_name!r} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
    return obj


def resolve_graph(target: str, db: str | None, *, need_store: bool = True) -> "CompiledGraph":
    """Compile ``target`` on the ``--db`` store (a CompiledGraph keeps its own store when no
    --db is given)."""
    from plait.graph.builder import Dag, Graph
    from plait.graph.compiled import CompiledGraph

    obj = load_target(target)
    if not isinstance(obj, Graph | Dag | CompiledGraph) and callable(obj):
        obj = obj()
    store: Checkpointer | None = None
    if need_store and not (isinstance(obj, CompiledGraph) and obj.checkpointer is not None and db is None):
        store = open_store(db or DEFAULT_DB, create=True)
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


# -- commands --------------------------------------------------------------------------------


def cmd_run(target: str, input: Any, thread: str | None, db: str | None, out: Out, durability: str) -> None:
    from plait.engine.events import CheckpointSaved, Interrupted, NodeFailed, NodeFinished
    from plait.graph.records import ThreadState

    if durability not in ("sync", "async", "exit"):
        raise UsageError(f"--durability is one of sync, async, exit; got {durability!r}")
    mode = cast("Durability", durability)
    app = resolve_graph(target, db)
    thread_id = thread or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    if not out.json:
        out.line(f"thread {thread_id}")

    async def drive() -> ThreadState:
        async for ev in app.astream(input, thread_id=thread_id, mode="events", durability=mode):
            if out.json:
                continue
            if isinstance(ev, NodeFinished):
                out.line(f"  step {ev.step}  {ev.node}  wrote {', '.join(sorted(ev.writes)) or '-'}")
            elif isinstance(ev, NodeFailed):
                retry = " (will retry)" if ev.will_retry else ""
                out.line(f"  step {ev.step}  {ev.node}  failed: {ev.error}{retry}")
            elif isinstance(ev, CheckpointSaved):
                out.line(f"  step {ev.step}  checkpoint {ev.checkpoint_id}")
            elif isinstance(ev, Interrupted):
                out.line(f"  step {ev.step}  paused")
        return await app.aget_state(thread_id)

    try:
        state = run_sync(drive())
    except RunError as exc:
        if out.json:
            out.emit({"thread_id": thread_id, "status": "failed", "error": str(exc), "type": type(exc).__name__})
            raise Exit(EXIT_FAILED) from None
        raise
    status = "interrupted" if state.interrupts else ("done" if not state.next else "paused")
    if out.json:
        out.emit(
            {
                "thread_id": thread_id,
                "status": status,
                "checkpoint_id": state.checkpoint_id,
                "step": state.step,
                "values": state.values,
                "next": list(state.next),
                "interrupts": [i.to_json() for i in state.interrupts],
            }
        )
    else:
        out.value("values", state.values)
        for i in state.interrupts:
            out.value(f"waiting for input: interrupt {i.id} in node {i.node!r}", i.value)
        if state.interrupts:
            out.line(f"resume with: plait resume {target} {thread_id} --resume JSON")
        elif state.next:
            out.line(f"paused before: {', '.join(state.next)}; continue with: plait resume {target} {thread_id}")
    if status != "done":
        raise Exit(EXIT_INTERRUPTED)


def cmd_threads(store: Checkpointer, namespace: str | None, out: Out) -> None:
    threads = run_sync(store.list_threads(namespace=namespace))
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
    cp = run_sync(store.get(thread, checkpoint, namespace=namespace))
    if cp is None:
        raise CheckpointNotFoundError(thread, checkpoint, namespace)
    return cp


def cmd_history(store: Checkpointer, thread: str, limit: int | None, namespace: str, out: Out) -> None:
    cps = run_sync(store.history(thread, namespace=namespace, limit=limit))
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
    ha = list(reversed(run_sync(store.history(a, namespace=namespace))))
    hb = list(reversed(run_sync(store.history(b, namespace=namespace))))
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
    db: str,
    namespace: str,
    out: Out,
) -> None:
    if run_sync(store.get(to, namespace=namespace)) is not None:
        raise UsageError(f"thread {to!r} already exists; fork into a new thread id")
    source = _get(store, thread, checkpoint, namespace).id
    if sets:
        if graph is None:
            raise UsageError("fork --set folds the edits through the graph's reducers: pass --graph MODULE:GRAPH")
        app = resolve_graph(graph, db)
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
    meta = {k: v for k, v in thaw(src.metadata).items() if k in ("graph", "reducers")}
    meta |= {"source": "fork", "step": src.step, "forked_from": {"thread_id": thread, "checkpoint_id": src.id}}
    cid = new_checkpoint_id()
    cp = Checkpoint(
        thread_id=to,
        namespace=namespace,
        id=cid,
        parent_id=None,
        step=src.step,
        values=dict(src.values),
        versions=dict(src.versions),
        next_tasks=src.next_tasks,
        barriers=dict(src.barriers),
        metadata=meta,
        created_at=time.time(),
    )
    writes = [WritesBatch(thread_id=to, namespace=namespace, checkpoint_id=cid, writes=src.pending_writes)]
    run_sync(
        store.commit(
            checkpoints=[CheckpointWrite(checkpoint=cp, changed=frozenset(cp.values))],
            writes=writes if src.pending_writes else [],
        )
    )
    return cid


def cmd_update(app: "CompiledGraph", thread: str, sets: dict[str, Any], as_node: str | None, out: Out) -> None:
    if not sets:
        raise UsageError("update needs at least one --set key=json")
    cid = app.update_state(thread, sets, as_node=as_node)
    state = app.get_state(thread)
    if out.json:
        out.emit({"thread_id": thread, "checkpoint_id": cid, "values": state.values, "next": list(state.next)})
    else:
        out.line(f"updated {thread}: {', '.join(sets)} (checkpoint {cid}); next: {', '.join(state.next) or '-'}")


def cmd_draw(target: str, fmt: str, output: str | None, out: Out) -> None:
    from plait.graph.draw import draw_ascii, draw_mermaid, draw_svg

    drawers = {"mermaid": draw_mermaid, "ascii": draw_ascii, "svg": draw_svg}
    if fmt not in drawers:
        raise UsageError(f"--format is one of mermaid, ascii, svg; got {fmt!r}")
    app = resolve_graph(target, None, need_store=False)
    text = drawers[fmt](app.spec)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        if out.json:
            out.emit({"format": fmt, "path": output})
        else:
            out.line(f"wrote {output}")
    elif out.json:
        out.emit({"format": fmt, "text": text})
    else:
        sys.stdout.write(text)


def cmd_db_stats(store: Checkpointer, db: str, out: Out) -> None:
    threads = run_sync(store.list_threads(namespace=None))
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
        targets = [(t.namespace, t.thread_id) for t in run_sync(store.list_threads(namespace=namespace))]
    dropped = {
        f"{ns}/{t}" if ns else t: run_sync(store.prune(t, keep_last=keep_last, namespace=ns)) for ns, t in targets
    }
    if out.json:
        out.emit({"dropped": dropped, "total": sum(dropped.values())})
    else:
        out.line(f"dropped {sum(dropped.values())} checkpoints from {len(dropped)} threads (keeping {keep_last})")


def cmd_demo(db: str, out: Out) -> None:
    from plait import _demo

    if not os.path.exists(os.path.dirname(os.path.abspath(db))):
        raise UsageError(f"no folder for {db!r}")
    if out.json:
        with open(os.devnull, "w") as sink:
            stdout, sys.stdout = sys.stdout, sink
            try:
                summary = _demo.run_demo(db, out=_demo.Reporter())
            finally:
                sys.stdout = stdout
        out.emit(summary)
    else:
        _demo.run_demo(db, out=_demo.reporter(out.rich))


# -- the typer application -------------------------------------------------------------------


def build_app() -> "typer.Typer":
    """The typer application (imports typer)."""
    import typer

    app = typer.Typer(
        name="plait",
        help="Durable, stateful graph workflows: run graphs, inspect, edit and fork their threads.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    db_app = typer.Typer(help="Look after the store: migrate, prune, stats.", no_args_is_help=True)
    app.add_typer(db_app, name="db")

    Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
    Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks.")]
    Db = Annotated[str, typer.Option("--db", help="SQLite file or postgresql:// DSN.")]
    OptDb = Annotated[
        str | None, typer.Option("--db", help=f"SQLite file or postgresql:// DSN [default: {DEFAULT_DB}].")
    ]
    Ns = Annotated[str, typer.Option("--namespace", help="The graph's namespace.")]
    Target = Annotated[str, typer.Argument(help="MODULE:GRAPH (a module or a .py file, and a graph or factory).")]
    Sets = Annotated[list[str] | None, typer.Option("--set", help="key=json (repeatable).")]

    @app.command()
    def demo(
        db: Annotated[str, typer.Option("--db", help="Where the demo keeps its SQLite file.")] = "plait-demo.db",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run the bundled demo: fan-out, an interrupt, a crash in a child process, the resume, a fork."""
        guarded(debug, lambda: cmd_demo(db, Out.make(as_json)))

    @app.command()
    def run(
        target: Target,
        input: Annotated[str, typer.Option("--input", "-i", help="JSON input, or @file.")] = "{}",
        thread: Annotated[str | None, typer.Option("--thread", "-t", help="Thread id (new if not given).")] = None,
        db: OptDb = None,
        durability: Annotated[str, typer.Option(help="sync, async or exit.")] = "sync",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run a graph on a thread (exit 3 when it pauses for input)."""
        guarded(debug, lambda: cmd_run(target, parse_json(input, "--input"), thread, db, Out.make(as_json), durability))

    @app.command()
    def resume(
        target: Target,
        thread: Annotated[str, typer.Argument(help="The thread to continue.")],
        resume_value: Annotated[
            str | None, typer.Option("--resume", "-r", help="JSON answer to the pending interrupt, or @file.")
        ] = None,
        db: OptDb = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Continue a thread: after a pause, a failure or a crash; --resume answers an interrupt."""

        def body() -> None:
            from plait.types import Command

            value = None if resume_value is None else Command(resume=parse_json(resume_value, "--resume"))
            cmd_run(target, value, thread, db, Out.make(as_json), "sync")

        guarded(debug, body)

    @app.command()
    def threads(
        db: Db = DEFAULT_DB,
        namespace: Annotated[str | None, typer.Option("--namespace", help="Only this namespace.")] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List the threads in a store, newest first."""
        guarded(debug, lambda: cmd_threads(open_store(db), namespace, Out.make(as_json)))

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
        guarded(debug, lambda: cmd_history(open_store(db), thread, limit, namespace, Out.make(as_json)))

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
        guarded(debug, lambda: cmd_state(open_store(db), thread, checkpoint, key, namespace, Out.make(as_json)))

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
        guarded(debug, lambda: cmd_diff(open_store(db), a, b, namespace, Out.make(as_json)))

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
        guarded(
            debug,
            lambda: cmd_fork(
                open_store(db), thread, checkpoint, to, parse_sets(set_ or []), graph, db, namespace, Out.make(as_json)
            ),
        )

    @app.command()
    def update(
        thread: str,
        graph: Annotated[str, typer.Option("--graph", help="MODULE:GRAPH (its reducers fold the update).")],
        set_: Sets = None,
        as_node: Annotated[str | None, typer.Option("--as-node", help="Write as this node.")] = None,
        db: Db = DEFAULT_DB,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Write to a thread's state through the reducers, as a new checkpoint."""

        def body() -> None:
            open_store(db)  # refuse a missing file before loading the graph
            cmd_update(resolve_graph(graph, db), thread, parse_sets(set_ or []), as_node, Out.make(as_json))

        guarded(debug, body)

    @app.command()
    def draw(
        target: Target,
        fmt: Annotated[str, typer.Option("--format", "-f", help="mermaid, ascii or svg.")] = "mermaid",
        output: Annotated[str | None, typer.Option("--output", "-o", help="Write to this file.")] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Draw a graph: Mermaid text, ASCII or SVG (no network)."""
        guarded(debug, lambda: cmd_draw(target, fmt, output, Out.make(as_json)))

    @db_app.command("migrate")
    def db_migrate(db: Db = DEFAULT_DB, as_json: Json = False, debug: Debug = False) -> None:
        """Create the store, or bring its schema up to date."""

        def body() -> None:
            open_store(db, create=True)
            out = Out.make(as_json)
            if out.json:
                out.emit({"store": db, "migrated": True})
            else:
                out.line(f"{db}: up to date")

        guarded(debug, body)

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
        guarded(debug, lambda: cmd_db_prune(open_store(db), thread, keep_last, namespace, Out.make(as_json)))

    @db_app.command("stats")
    def db_stats(db: Db = DEFAULT_DB, as_json: Json = False, debug: Debug = False) -> None:
        """How many threads and checkpoints a store holds."""
        guarded(debug, lambda: cmd_db_stats(open_store(db), db, Out.make(as_json)))

    return app


def _installed(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``plait`` entry point; returns the exit code."""
    if not (_installed("typer") and _installed("rich")):
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_USAGE
    app = build_app()
    try:
        app(args=list(argv) if argv is not None else None, prog_name="plait")
    except Exit as exc:
        return exc.code
    except SystemExit as exc:  # how click ends: usage errors are 2, --help is 0
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_FAILED)
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


def _entry() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
