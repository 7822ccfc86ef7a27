"""The ``plait`` commands that load a graph: ``run``, ``resume``, ``update``, ``draw``, and
``demo``, which runs the bundled one (:mod:`plait.cli.demo`).

``run`` and ``resume`` show each step live (plain lines when piped) and end with the exit
code of what happened: 0 the run finished, 1 it failed, 3 it paused for input.
"""

import os
import shlex
import sys
import time
import uuid
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from plait._sync import run_sync
from plait.checkpoint.model import Checkpoint
from plait.cli.arguments import check_positive, parse_context, parse_input, parse_json, parse_sets
from plait.cli.context import Invocation, run_command
from plait.cli.options import (
    Checkpoint as CheckpointOpt,
)
from plait.cli.options import (
    Db,
    Debug,
    Json,
    OptNamespace,
    RecursionLimit,
    RunContext,
    Sets,
    Step,
    Target,
    Thread,
)
from plait.cli.output import EXIT_INTERRUPTED, Exit, note
from plait.cli.selection import find_checkpoint
from plait.errors import ArgumentError, CheckpointNotFoundError
from plait.inspect_json import checkpoint_json

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph
    from plait.types import Durability

__all__ = ["cmd_demo", "cmd_draw", "cmd_resume", "cmd_run", "cmd_update", "register"]

DURABILITIES = ("sync", "async", "exit")
FORMATS = ("mermaid", "ascii", "svg", "png")


def run_status(cp: Checkpoint, record: dict[str, Any]) -> str:
    """How a run ended: ``done``, ``interrupted`` (waits for ``--resume``) or ``paused`` (at a
    breakpoint). Not the thread's status (``plait threads``): after a run that is done the
    thread rests ``idle``, after one interrupted or paused ``interrupted``; docs/cli.md has
    the mapping."""
    if record["interrupts"]:
        return "interrupted"
    return "paused" if cp.next_tasks else "done"


def cmd_run(
    inv: Invocation,
    app: "CompiledGraph",
    input: Any,
    thread_id: str,
    *,
    durability: str = "sync",
    recursion_limit: int = 10_000,
    checkpoint_id: str | None = None,
    wait: float | None = None,
    context: Any = None,
) -> None:
    """Run ``app`` on ``thread_id`` with live progress, then print where it stopped.

    Steps are numbered as ``plait history`` numbers them: a node's line carries the step of
    the checkpoint its writes land in (one more than the step it started from).
    """
    from plait.cli.progress import progress_line, send_items
    from plait.engine.events import CheckpointSaved, NodeFailed, NodeFinished

    if durability not in DURABILITIES:
        raise ArgumentError("--durability", f"--durability is one of {', '.join(DURABILITIES)}; got {durability!r}")
    check_positive(recursion_limit, "--recursion-limit")
    out = inv.out
    ran = 0
    if not out.json:
        out.line(f"thread {thread_id}")
    waiting = _waiting(app, thread_id, wait)
    assert app.checkpointer is not None
    store = app.checkpointer

    async def drive() -> None:
        nonlocal ran
        step_from: str | None = checkpoint_id  # the checkpoint the running step started from
        items: dict[str, Any] | None = None  # its tasks' Send items, read at its first node event
        async for ev in app.astream(
            input,
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            mode="events",
            durability=cast("Durability", durability),
            recursion_limit=recursion_limit,
            wait=wait,
            context=context,
        ):
            waiting.close()
            if isinstance(ev, NodeFinished):
                ran += 1
            if out.json:
                continue
            if isinstance(ev, CheckpointSaved):
                step_from, items = ev.checkpoint_id, None
            elif isinstance(ev, NodeFinished | NodeFailed) and items is None:
                items = await send_items(store, thread_id, app.namespace, step_from)
            line = progress_line(ev, thread_id, items or {})
            if line is not None:
                out.line(line)

    try:
        with inv.run_phase():
            run_sync(drive())
    finally:
        waiting.close()
    head = _head(app, thread_id)
    _finish(inv, app, head, ran=ran > 0)


class _Waiting:
    """What the operator sees while a run waits for another run's lease: a spinner on a
    terminal, one line on stderr otherwise; closed at the run's first event."""

    def __init__(self, text: str | None) -> None:
        self._status: Any = None
        if text is None:
            return
        if sys.stderr.isatty():
            try:
                from rich.console import Console

                self._status = Console(stderr=True).status(text)
                self._status.start()
                return
            except ImportError:
                pass
        note(text)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _waiting(app: "CompiledGraph", thread_id: str, wait: float | None) -> _Waiting:
    """Say so when the run will wait for a live run that holds the thread (``--wait``)."""
    if not wait:
        return _Waiting(None)
    assert app.checkpointer is not None
    info = run_sync(app.checkpointer.aget_thread(thread_id, namespace=app.namespace))
    if info is None or info.status != "busy" or info.lease is None:
        return _Waiting(None)
    ends = time.strftime("%H:%M:%S", time.localtime(info.lease.expires_at))
    return _Waiting(
        f"waiting up to {wait:g}s for {info.lease.owner}, which holds {thread_id} (its lease ends at {ends} "
        "unless renewed)"
    )


def _head(app: "CompiledGraph", thread_id: str) -> Checkpoint:
    assert app.checkpointer is not None
    cp = run_sync(app.checkpointer.aget(thread_id, namespace=app.namespace))
    if cp is None:
        raise CheckpointNotFoundError(thread_id, None, app.namespace)
    return cp


def _finish(inv: Invocation, app: "CompiledGraph", head: Checkpoint, *, ran: bool) -> None:
    """Print where a run stopped, and leave with 3 if it waits."""
    out = inv.out
    record = checkpoint_json(head)
    status = run_status(head, record)
    thread = head.thread_id
    resume = f"plait resume {inv.target} {thread}"
    if out.json:
        out.emit({**record, "status": status, "ran": ran})
    else:
        out.value("values", head.values)
        for i in record["interrupts"]:
            out.value(f"waiting for input: interrupt {i['id']} in node {i['node']!r}", i["value"])
        if status == "interrupted":
            out.line(f"resume with: {resume} --resume JSON{inv.run_flags()}")
        elif status == "paused":
            out.line(f"paused before: {', '.join(record['next'])}; continue with: {resume}{inv.run_flags()}")
    if status != "done":
        raise Exit(EXIT_INTERRUPTED)


def cmd_resume(
    inv: Invocation,
    app: "CompiledGraph",
    thread_id: str,
    resume_value: str | None,
    *,
    checkpoint: str | None,
    step: int | None,
    recursion_limit: int,
    wait: float | None = None,
    context: Any = None,
) -> None:
    """Continue a thread, or say there is nothing to continue."""
    from plait.types import Command

    assert app.checkpointer is not None
    value = None if resume_value is None else Command(resume=parse_json(resume_value, "--resume"))
    start = find_checkpoint(app.checkpointer, thread_id, app.namespace, checkpoint, step)
    replay = checkpoint is not None or step is not None
    if value is not None:
        _check_answer(inv, start, thread_id, value.resume, replay=replay)
    if not replay and value is None and not start.next_tasks and not checkpoint_json(start)["interrupts"]:
        if inv.out.json:
            inv.out.emit({**checkpoint_json(start), "status": "done", "ran": False})
        else:
            inv.out.line(
                f"thread {thread_id} is idle: its last run is done (step {start.step}, checkpoint {start.id}), so "
                f"there is nothing to resume. To continue it with new input: plait run {inv.target} --thread "
                f"{shlex.quote(thread_id)} --input JSON{inv.run_flags()}"
            )
        return
    if wait is not None and wait < 0:
        raise ArgumentError("--wait", f"--wait takes seconds, 0 or more; got {wait:g}")
    cmd_run(
        inv,
        app,
        value,
        thread_id,
        recursion_limit=recursion_limit,
        checkpoint_id=start.id if replay else None,
        wait=wait,
        context=context,
    )


def _check_answer(inv: Invocation, start: Checkpoint, thread_id: str, answer: Any, *, replay: bool) -> None:
    """Refuse a ``--resume`` the thread cannot take, in the command line's words (the
    library's own refusal names Python calls): no interrupt waits, or several do and the
    answer does not say which it is for. ``replay``: ``start`` was chosen (``--checkpoint``,
    ``--step``), so the command that applies goes on from it, not from the head.

    Raises:
        ArgumentError: on ``--resume``, with the command that applies instead.
    """
    waiting = checkpoint_json(start, values=False)["interrupts"]
    q = shlex.quote
    at = f"{thread_id} (step {start.step}, checkpoint {start.id})"
    if not waiting:
        if start.next_tasks:
            raise ArgumentError(
                "--resume",
                f"thread {at} waits for no answer: it has work left to do. Continue it without --resume: "
                f"plait resume {inv.target} {q(thread_id)}{f' --checkpoint {start.id}' if replay else ''}"
                f"{inv.run_flags()}",
            )
        raise ArgumentError(
            "--resume",
            f"thread {at} is idle (its last run is done): no interrupt waits for an answer. To continue it with "
            "new input: "
            f"plait run {inv.target} --thread {q(thread_id)} --input JSON{inv.run_flags()}, or branch it with: "
            f"plait fork {q(thread_id)} --to NEW{inv.flags()}",
        )
    ids = [i["id"] for i in waiting]
    if len({i["task_id"] for i in waiting}) > 1 and not (
        isinstance(answer, dict) and answer and set(answer) <= set(ids)
    ):
        raise ArgumentError(
            "--resume",
            f"thread {at} has {len(ids)} interrupts waiting ({', '.join(ids)}): answer each by its id, "
            f"--resume '{{\"{ids[0]}\": VALUE, ...}}'; see their questions with: "
            f"plait state {q(thread_id)}{inv.flags()}",
        )


def cmd_update(
    inv: Invocation, app: "CompiledGraph", thread: str, sets: list[tuple[str, Any]], as_node: str | None
) -> None:
    if not sets:
        raise ArgumentError("--set", "update needs at least one --set key=value (or key:=json)")
    assert app.checkpointer is not None
    find_checkpoint(app.checkpointer, thread, app.namespace)  # an unknown thread is not found (2)
    cid = app.update_state(thread, sets, as_node=as_node)
    head = _head(app, thread)
    if inv.out.json:
        inv.out.emit(checkpoint_json(head))
    else:
        keys = ", ".join(dict.fromkeys(k for k, _ in sets))
        nxt = ", ".join(checkpoint_json(head, values=False)["next"]) or "-"
        inv.out.line(f"updated {thread}: {keys} (checkpoint {cid}); next: {nxt}")


def cmd_draw(inv: Invocation, target: str, fmt: str, output: str | None) -> None:
    from plait.graph.draw import draw_ascii, draw_mermaid, draw_svg

    drawers = {"mermaid": draw_mermaid, "ascii": draw_ascii, "svg": draw_svg}
    if fmt not in FORMATS:
        raise ArgumentError("--format", f"--format is one of {', '.join(FORMATS)}; got {fmt!r}")
    if fmt == "png" and not output:
        raise ArgumentError("--output", "a PNG is binary: give --output FILE.png (or draw --format svg to stdout)")
    out = inv.out
    app = inv.graph(target, need_store=False)
    if fmt == "png":
        assert output is not None
        app.get_graph().draw_png(output)  # DrawingUnavailableError (exit 1) names the extra to install
        if out.json:
            out.emit({"format": fmt, "path": output})
        else:
            out.line(f"wrote {output}")
        return
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
        out.text(text)


def cmd_demo(inv: Invocation, db: str) -> None:
    from plait.cli import demo as _demo
    from plait.errors import StoreAddressError

    if not os.path.exists(os.path.dirname(os.path.abspath(db))):
        raise StoreAddressError(db, f"its folder {os.path.dirname(os.path.abspath(db))!r} does not exist")
    out = inv.out
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


def new_thread_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The commands that load a graph: ``demo``, ``run``, ``resume``, ``update``, ``draw``."""

    @app.command()
    def demo(
        db: Annotated[
            str, typer.Option("--db", metavar="FILE", help="The SQLite file the demo writes its threads to.")
        ] = "plait-demo.db",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run the bundled demo: fan-out, an interrupt, a crash in a child process, the resume, a fork."""
        run_command(lambda inv: cmd_demo(inv, db), as_json=as_json, debug=debug)

    @app.command()
    def run(
        target: Target,
        input: Annotated[
            str, typer.Option("--input", "-i", metavar="JSON", help="The input: a JSON object, or @file holding one.")
        ] = "{}",
        thread: Annotated[
            str | None,
            typer.Option("--thread", "-t", metavar="THREAD", help="The thread id (default: a new one, printed)."),
        ] = None,
        db: Db = None,
        namespace: OptNamespace = None,
        durability: Annotated[
            str,
            typer.Option(
                "--durability",
                metavar="MODE",
                help="sync commits every step before the next; async overlaps them; exit stores at the end.",
            ),
        ] = "sync",
        recursion_limit: RecursionLimit = 10_000,
        context: RunContext = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run a graph on a thread (exit 3 when it pauses for input)."""

        def body(inv: Invocation) -> None:
            value = parse_input(input)
            given = parse_context(context)
            inv.context = context
            graph = inv.graph(target, namespace=namespace)
            cmd_run(
                inv,
                graph,
                value,
                thread or new_thread_id(),
                durability=durability,
                recursion_limit=recursion_limit,
                context=given,
            )

        run_command(body, as_json=as_json, debug=debug, db=db)

    @app.command()
    def resume(
        target: Target,
        thread: Annotated[str, typer.Argument(metavar="THREAD", help="The thread to continue.", show_default=False)],
        resume_value: Annotated[
            str | None,
            typer.Option(
                "--resume", "-r", metavar="JSON", help="The answer to the pending interrupt (JSON, or @file)."
            ),
        ] = None,
        checkpoint: CheckpointOpt = None,
        step: Step = None,
        db: Db = None,
        namespace: OptNamespace = None,
        recursion_limit: RecursionLimit = 10_000,
        wait: Annotated[
            float | None,
            typer.Option(
                "--wait",
                "-w",
                metavar="SECONDS",
                help="If another run holds the thread, wait up to SECONDS for it to finish (default: fail at once).",
            ),
        ] = None,
        context: RunContext = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Continue a thread after a pause, a failure or a crash; with --checkpoint or --step, replay from there."""

        def body(inv: Invocation) -> None:
            given = parse_context(context)
            inv.context = context
            graph = inv.graph(target, namespace=namespace, create=False)
            cmd_resume(
                inv,
                graph,
                thread,
                resume_value,
                checkpoint=checkpoint,
                step=step,
                recursion_limit=recursion_limit,
                wait=wait,
                context=given,
            )

        run_command(body, as_json=as_json, debug=debug, db=db)

    @app.command()
    def update(
        thread: Thread,
        graph: Annotated[
            str,
            typer.Option(
                "--graph",
                "-g",
                metavar="MODULE:GRAPH",
                help="The graph whose reducers fold the writes.",
                show_default=False,
            ),
        ],
        set_: Sets = None,
        as_node: Annotated[
            str | None,
            typer.Option("--as-node", metavar="NODE", help="Write as this node: what runs next are its successors."),
        ] = None,
        db: Db = None,
        namespace: OptNamespace = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Write to a thread's state through the graph's reducers, as a new checkpoint."""

        def body(inv: Invocation) -> None:
            sets = parse_sets(set_ or [])
            app = inv.graph(graph, namespace=namespace, create=False)
            cmd_update(inv, app, thread, sets, as_node)

        run_command(body, as_json=as_json, debug=debug, db=db)

    @app.command()
    def draw(
        target: Target,
        fmt: Annotated[
            str, typer.Option("--format", "-f", metavar="FORMAT", help="mermaid, ascii, svg or png (with -o).")
        ] = "mermaid",
        output: Annotated[
            str | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE (default: stdout).")
        ] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Draw a graph: Mermaid text, ASCII, SVG or PNG (no network, no graphviz; PNG needs plait[draw])."""
        run_command(lambda inv: cmd_draw(inv, target, fmt, output), as_json=as_json, debug=debug)
