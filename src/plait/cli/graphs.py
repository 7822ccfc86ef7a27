"""The ``plait`` commands that load a graph: ``run`` and ``resume``, ``update``, ``draw``;
and ``demo``, which runs the bundled one (:mod:`plait.cli.demo`).
"""

import os
import sys
import time
import uuid
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from plait._sync import run_sync
from plait.cli.arguments import DEFAULT_DB, parse_json, parse_sets
from plait.cli.context import Invocation, run_command
from plait.cli.options import Db, Debug, Json, OptDb, Sets, Target
from plait.cli.output import EXIT_FAILED, EXIT_INTERRUPTED, Exit, Out, UsageError
from plait.errors import RunError

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph
    from plait.types import Durability

__all__ = ["cmd_demo", "cmd_draw", "cmd_run", "cmd_update", "register"]


def cmd_run(inv: Invocation, target: str, input: Any, thread: str | None, durability: str) -> None:
    from plait.engine.events import CheckpointSaved, Interrupted, NodeFailed, NodeFinished
    from plait.graph.records import ThreadState

    if durability not in ("sync", "async", "exit"):
        raise UsageError(f"--durability is one of sync, async, exit; got {durability!r}")
    mode = cast("Durability", durability)
    out = inv.out
    app = inv.graph(target)
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


def cmd_update(app: "CompiledGraph", thread: str, sets: dict[str, Any], as_node: str | None, out: Out) -> None:
    if not sets:
        raise UsageError("update needs at least one --set key=json")
    cid = app.update_state(thread, sets, as_node=as_node)
    state = app.get_state(thread)
    if out.json:
        out.emit({"thread_id": thread, "checkpoint_id": cid, "values": state.values, "next": list(state.next)})
    else:
        out.line(f"updated {thread}: {', '.join(sets)} (checkpoint {cid}); next: {', '.join(state.next) or '-'}")


def cmd_draw(inv: Invocation, target: str, fmt: str, output: str | None) -> None:
    from plait.graph.draw import draw_ascii, draw_mermaid, draw_svg

    drawers = {"mermaid": draw_mermaid, "ascii": draw_ascii, "svg": draw_svg}
    if fmt not in drawers:
        raise UsageError(f"--format is one of mermaid, ascii, svg; got {fmt!r}")
    out = inv.out
    app = inv.graph(target, need_store=False)
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


def cmd_demo(db: str, out: Out) -> None:
    from plait.cli import demo as _demo

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


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The commands that load a graph: ``demo``, ``run``, ``resume``, ``update``, ``draw``."""

    @app.command()
    def demo(
        db: Annotated[str, typer.Option("--db", help="Where the demo keeps its SQLite file.")] = "plait-demo.db",
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Run the bundled demo: fan-out, an interrupt, a crash in a child process, the resume, a fork."""
        run_command(lambda inv: cmd_demo(db, inv.out), as_json=as_json, debug=debug)

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
        run_command(
            lambda inv: cmd_run(inv, target, parse_json(input, "--input"), thread, durability),
            as_json=as_json,
            debug=debug,
            db=db,
        )

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

        def body(inv: Invocation) -> None:
            from plait.types import Command

            value = None if resume_value is None else Command(resume=parse_json(resume_value, "--resume"))
            cmd_run(inv, target, value, thread, "sync")

        run_command(body, as_json=as_json, debug=debug, db=db)

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

        def body(inv: Invocation) -> None:
            inv.store()  # refuse a missing file before loading the graph
            cmd_update(inv.graph(graph), thread, parse_sets(set_ or []), as_node, inv.out)

        run_command(body, as_json=as_json, debug=debug, db=db)

    @app.command()
    def draw(
        target: Target,
        fmt: Annotated[str, typer.Option("--format", "-f", help="mermaid, ascii or svg.")] = "mermaid",
        output: Annotated[str | None, typer.Option("--output", "-o", help="Write to this file.")] = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Draw a graph: Mermaid text, ASCII or SVG (no network)."""
        run_command(lambda inv: cmd_draw(inv, target, fmt, output), as_json=as_json, debug=debug)
