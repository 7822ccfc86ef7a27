"""The ``plait`` commands that load a graph: ``run`` and ``resume``, ``update``, ``draw``;
and ``demo``, which runs the bundled one (:mod:`plait._demo`).
"""

import os
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any, cast

from plait._cli_args import resolve_graph
from plait._cli_output import EXIT_FAILED, EXIT_INTERRUPTED, Exit, Out, UsageError
from plait._sync import run_sync
from plait.errors import RunError

if TYPE_CHECKING:
    from plait.graph.compiled import CompiledGraph
    from plait.types import Durability

__all__ = ["cmd_demo", "cmd_draw", "cmd_run", "cmd_update"]


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
