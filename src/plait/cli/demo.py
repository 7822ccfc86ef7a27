"""The bundled demo: an agent-style workflow that is interrupted, crashes, resumes and forks.

``plait demo`` runs it on a SQLite file in the current folder. No network and no model: the
"LLM" and the "tools" are deterministic stand-ins, so every run tells the same story:

1. a question fans out to three research branches that run in parallel; their findings merge
   through reducers (``AppendMessages``, ``AppendList``, ``MergeMap``) and a join waits for
   all three before the draft is written;
2. the run pauses on ``interrupt()`` for a human approval; the demo shows the payload and
   approves it itself with ``Command(resume=...)``;
3. the resumed run is executed by a *child process* that dies hard (``os._exit``) in the
   middle of the delivery step, after two of its three tasks were saved and after the third
   recorded an upload in the effects ledger;
4. this process resumes the thread: the saved tasks do not run again and the upload is not
   repeated (the recorded result, stamped with the child's pid, comes back);
5. a fork from the checkpoint before the draft, with an edit, runs to the end on a new
   thread, and the two threads are compared.

``python -m plait.cli.demo crash-child --db FILE --thread T --resume JSON`` is the child.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from plait._frozen import thaw
from plait.checkpoint.base import Checkpointer
from plait.engine.context import NodeContext, interrupt
from plait.engine.events import CheckpointSaved, Interrupted, NodeFinished, NodeStarted
from plait.graph.builder import Graph
from plait.graph.compiled import CompiledGraph
from plait.state.diff import StateDiff
from plait.state.reducers import AppendList, AppendMessages, MergeMap
from plait.state.schema import StateSchema
from plait.types import END, START, Command

__all__ = ["DEFAULT_DB", "build_graph", "run_demo"]

DEFAULT_DB = "plait-demo.db"
CRASH_EXIT_CODE = 137
"""What the child exits with when it "crashes" (the code a SIGKILLed process reports)."""


QUESTION = "Should our team move the nightly ETL batch to an event-driven pipeline?"

# Calls of each node function in *this* process: the proof that a resume skips finished work.
CALLS: dict[str, int] = {}
UPLOADS: list[str] = []
_CRASH_IN_DELIVERY = False


def _called(node: str) -> None:
    CALLS[node] = CALLS.get(node, 0) + 1


def _digest(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=4).hexdigest()


# -- the workflow ----------------------------------------------------------------------------


def schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add_lww("question")
        .add_lww("style", default="detailed")
        .add("messages", AppendMessages())
        .add("notes", AppendList())
        .add("sources", MergeMap())
        .add_lww("draft")
        .add_lww("approval")
        .add("deliveries", MergeMap())
        .add("trail", AppendList())
        .build()
    )


def intake(state: Mapping[str, Any]) -> dict[str, Any]:
    _called("intake")
    return {
        "messages": [{"id": "q", "role": "user", "content": state["question"]}],
        "trail": ["intake"],
    }


def plan(state: Mapping[str, Any]) -> dict[str, Any]:
    _called("plan")
    text = "Plan: check public write-ups, our incident log and the cost sheet, then draft an answer."
    return {"messages": [{"id": "plan", "role": "assistant", "content": text}], "trail": ["plan"]}


def _research(name: str, findings: list[str], source_count: int) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def research(state: Mapping[str, Any]) -> dict[str, Any]:
        _called(name)
        return {
            "notes": [f"{name}: {f}" for f in findings],
            "sources": {name: source_count},
            "messages": [{"id": f"tool-{name}", "role": "tool", "name": name, "content": "; ".join(findings)}],
            "trail": [name],
        }

    research.__name__ = research.__qualname__ = name
    return research


search_web = _research(
    "search_web",
    ["event-driven pipelines cut data latency from hours to minutes", "they add operational moving parts"],
    4,
)
search_incidents = _research(
    "search_incidents", ["5 of the last 12 ETL incidents were late batches blocking reports"], 12
)
estimate_cost = _research("estimate_cost", ["a managed queue costs about 40% of the batch cluster"], 1)


def draft(state: Mapping[str, Any]) -> dict[str, Any]:
    """The "LLM": a deterministic answer built from the notes, shaped by ``style``."""
    _called("draft")
    notes = list(state["notes"])
    if state["style"] == "brief":
        text = f"Yes: move the late-prone reports first ({len(notes)} findings support it)."
    else:
        text = "Recommendation: move to an event-driven pipeline in two phases. " + " ".join(
            _sentence(n.split(": ", 1)[1]) for n in notes
        )
    return {
        "draft": text,
        "messages": [{"id": "draft", "role": "assistant", "content": text}],
        "trail": ["draft"],
    }


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def approve(state: Mapping[str, Any]) -> dict[str, Any]:
    """Pause for a human: the payload is what they are asked; the resume value is the answer."""
    _called("approve")
    answer = interrupt(
        {
            "ask": "Publish this answer?",
            "draft": state["draft"],
            "sources": dict(state["sources"]),
        }
    )
    return {"approval": answer, "trail": ["approve"]}


def route_approval(state: Mapping[str, Any]) -> str:
    approval = state.get("approval") or {}
    return "approved" if approval.get("approved") else "rejected"


def publish(state: Mapping[str, Any]) -> dict[str, Any]:
    _called("publish")
    by = (state.get("approval") or {}).get("by", "someone")
    final = f"{state['draft']} (approved by {by})"
    return {"messages": [{"id": "final", "role": "assistant", "content": final}], "trail": ["publish"]}


def _deliver(name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def deliver(state: Mapping[str, Any]) -> dict[str, Any]:
        _called(name)
        return {"deliveries": {name: {"pid": os.getpid()}}, "trail": [name]}

    deliver.__name__ = deliver.__qualname__ = name
    return deliver


send_email = _deliver("send_email")
post_chat = _deliver("post_chat")


async def archive(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Upload the answer to an archive: an external side effect, recorded in the ledger."""
    _called("archive")

    def upload() -> dict[str, Any]:
        UPLOADS.append(ctx.task_id)
        return {"receipt": "arch-" + _digest(state["draft"]), "pid": os.getpid()}

    receipt = await ctx.aonce("upload", upload)
    if _CRASH_IN_DELIVERY:
        await _wait_for_siblings(ctx, 2)
        print(f"child {os.getpid()}: archive's upload is recorded in the effects ledger", flush=True)
        print(f"child {os.getpid()}: dying hard (os._exit) in the middle of 'archive'", flush=True)
        os._exit(CRASH_EXIT_CODE)
    return {"deliveries": {"archive": receipt}, "trail": ["archive"]}


_SAVER: Checkpointer | None = None


async def _wait_for_siblings(ctx: NodeContext, count: int, timeout: float = 20.0) -> None:
    """Wait until ``count`` sibling tasks of this super-step have their results saved, so the
    crash lands after they were committed (what a real crash mid-step often looks like)."""
    assert _SAVER is not None and ctx.thread_id is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cp = await _SAVER.aget(ctx.thread_id, ctx.checkpoint_id, namespace=ctx.namespace)
        done = {w.task_id for w in (cp.pending_writes if cp else ()) if w.kind == "result"}
        if len(done - {ctx.task_id}) >= count:
            return
        await asyncio.sleep(0.02)


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    _called("summarize")
    done = ", ".join(sorted(state["deliveries"]))
    return {
        "messages": [{"id": "summary", "role": "assistant", "content": f"Delivered to: {done}."}],
        "trail": ["summarize"],
    }


def build_graph() -> Graph:
    """The demo's graph (not compiled): ``plait draw plait.cli.demo:build_graph`` draws it."""
    g = Graph(schema())
    g.add_node("intake", intake).add_node("plan", plan)
    for fn in (search_web, search_incidents, estimate_cost):
        g.add_node(fn.__name__, fn)
    g.add_node("draft", draft).add_node("approve", approve).add_node("publish", publish)
    for fn in (send_email, post_chat):
        g.add_node(fn.__name__, fn)
    g.add_node("archive", archive).add_node("summarize", summarize)
    g.add_edge(START, "intake").add_edge("intake", "plan")
    for branch in ("search_web", "search_incidents", "estimate_cost"):
        g.add_edge("plan", branch)
    g.add_edge(["search_web", "search_incidents", "estimate_cost"], "draft")
    g.add_edge("draft", "approve")
    g.add_conditional_edges("approve", route_approval, {"approved": "publish", "rejected": "draft"})
    for target in ("send_email", "post_chat", "archive"):
        g.add_edge("publish", target)
    g.add_edge(["send_email", "post_chat", "archive"], "summarize")
    g.add_edge("summarize", END)
    return g


def open_graph(db: str) -> CompiledGraph:
    """The demo graph on a SQLite file."""
    global _SAVER
    app = build_graph().compile(checkpointer=_checkpointer(db), name="demo")
    _SAVER = app.checkpointer
    return app


def _checkpointer(db: str) -> Checkpointer:
    from plait.checkpoint.address import open as open_store

    return open_store(db)


async def _open_checkpointer(app: CompiledGraph) -> Checkpointer:
    """The demo graph's store, ready for use (``setup()`` is safe to repeat)."""
    checkpointer = app.checkpointer
    assert checkpointer is not None  # open_graph always compiles with one
    await checkpointer.asetup()
    return checkpointer


# -- showing progress ------------------------------------------------------------------------


class Reporter:
    """Plain lines (piped output, logs); :class:`RichReporter` on a terminal."""

    def section(self, title: str) -> None:
        print(f"\n== {title}", flush=True)

    def line(self, text: str) -> None:
        print(f"  {text}", flush=True)

    def event(self, step: int, subject: str, text: str) -> None:
        """One line of live progress: what happened in a super-step."""
        self.line(f"step {step:>2}  {subject:<17} {text}")

    def data(self, title: str, value: Any) -> None:
        import json

        print(f"  {title}:", flush=True)
        for row in json.dumps(thaw(value), indent=2, default=str).splitlines():
            print(f"    {row}", flush=True)


class RichReporter(Reporter):
    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console()

    def section(self, title: str) -> None:
        self.console.rule(f"[bold]{title}")

    def line(self, text: str) -> None:
        self.console.print(f"  {text}", highlight=False)

    def event(self, step: int, subject: str, text: str) -> None:
        from rich.markup import escape

        style = "dim" if subject == "checkpoint" else "bold cyan"
        line = f"  [dim]step {step:>2}[/dim]  [{style}]{escape(subject):<17}[/{style}] {escape(text)}"
        self.console.print(line, highlight=False)

    def data(self, title: str, value: Any) -> None:
        from rich.panel import Panel
        from rich.pretty import Pretty

        self.console.print(Panel(Pretty(thaw(value), expand_all=True), title=title, expand=False))


def reporter(rich: bool | None = None) -> Reporter:
    if rich is None:
        rich = sys.stdout.isatty()
    if rich:
        try:
            return RichReporter()
        except ImportError:
            pass
    return Reporter()


async def _drive(app: CompiledGraph, input: Any, thread: str, out: Reporter) -> dict[str, Any]:
    """Run with live progress; returns the final values (or the pending interrupts)."""
    async for ev in app.astream(input, thread_id=thread, mode="events"):
        if isinstance(ev, NodeStarted):
            out.event(ev.step + 1, ev.node, "started")  # numbered by the checkpoint it writes, as history is
        elif isinstance(ev, NodeFinished):
            out.event(ev.step + 1, ev.node, f"finished, wrote {', '.join(sorted(ev.writes)) or '-'}")
        elif isinstance(ev, CheckpointSaved):
            out.event(ev.step, "checkpoint", f"{ev.checkpoint_id[:12]}… saved ({ev.source})")
        elif isinstance(ev, Interrupted):
            out.event(ev.step + 1, "interrupt", f"paused: waiting for a human (the head stays at step {ev.step})")
    state = await app.aget_state(thread)
    return {"values": dict(state.values), "interrupts": list(state.interrupts), "next": list(state.next)}


# -- the story -------------------------------------------------------------------------------


def run_demo(db: str = DEFAULT_DB, *, out: Reporter | None = None, python: str | None = None) -> dict[str, Any]:
    """Run the whole demo on ``db`` and return what it left behind (thread ids, counts).

    Safe to run again on the same file: every run uses new thread ids.
    """
    out = out or reporter()
    app = open_graph(db)
    try:
        return _story(app, db, out, python or sys.executable)
    finally:
        assert app.checkpointer is not None
        asyncio.run(app.checkpointer.aclose())


def _story(app: CompiledGraph, db: str, out: Reporter, python: str) -> dict[str, Any]:  # noqa: PLR0915 - the demo's story, told in order as the user reads it
    run = time.strftime("%H%M%S") + "-" + uuid.uuid4().hex[:4]
    main, fork = f"demo-{run}", f"demo-{run}-brief"
    started = time.monotonic()

    out.section("1. Fan-out research, merged by reducers")
    out.line(f"thread {main} in {db}")
    result = asyncio.run(_drive(app, {"question": QUESTION}, main, out))
    values = result["values"]
    out.line(f"notes merged from 3 parallel branches (AppendList): {len(values['notes'])}")
    out.line(f"sources merged by MergeMap: {dict(values['sources'])}")

    out.section("2. Human in the loop: the run is paused on interrupt()")
    pending = result["interrupts"]
    if not pending:
        raise RuntimeError("the demo expected the run to pause for approval")
    out.data("the interrupt payload (what the human is asked)", pending[0].value)
    decision = {"approved": True, "by": "demo-reviewer"}
    out.line(f"auto-approving with Command(resume={decision})")

    out.section("3. The resumed run crashes in a child process")
    out.line("the child resumes the thread, delivers, and dies hard in the middle of that step")
    code = _run_child(python, db, main, decision, out)
    out.line(f"child exited with code {code} (a hard crash: no cleanup, no goodbye)")
    after_crash = app.get_state(main)
    finished = [t.node for t in after_crash.tasks if t.id in _finished_task_ids(app, main)]
    planned = ", ".join(t.node for t in after_crash.tasks)
    out.line(f"the head is step {after_crash.step}; step {after_crash.step + 1}'s tasks are {planned}")
    out.line(f"already saved before the crash: {', '.join(finished) or 'none'}")

    out.section("4. Resume in this process: finished work is not redone")
    CALLS.clear()
    UPLOADS.clear()
    out.line("the dead child's lease is taken over at once: this machine can tell it is gone")
    resumed = asyncio.run(_drive(app, None, main, out))
    calls_after_resume, uploads_after_resume = dict(CALLS), len(UPLOADS)
    values = resumed["values"]
    deliveries = values["deliveries"]
    out.line(f"node calls in this process: {dict(sorted(CALLS.items()))}")
    for node in finished:
        out.line(f"  {node}: {CALLS.get(node, 0)} calls here; its result came from pid {deliveries[node]['pid']}")
    receipt = deliveries["archive"]
    out.line(
        f"archive upload: performed {len(UPLOADS)} times here; the ledger returned receipt "
        f"{receipt['receipt']} recorded by pid {receipt['pid']} (this process is {os.getpid()})"
    )
    out.line(f"trail (each node once): {' → '.join(values['trail'])}")

    out.section("5. Time travel: fork from the checkpoint before the draft, with an edit")
    history = app.get_state_history(main)
    before_draft = next(h for h in reversed(history) if "draft" in h.next)
    out.line(f"forking {main} at step {before_draft.step} (checkpoint {before_draft.checkpoint_id[:12]}…) into {fork}")
    out.line("edit: style = 'brief'")
    app.fork(main, fork, checkpoint_id=before_draft.checkpoint_id, edits={"style": "brief"})
    forked = asyncio.run(_drive(app, None, fork, out))
    if forked["interrupts"]:
        out.line("the fork pauses for approval too; approving it")
        forked = asyncio.run(_drive(app, Command(resume={"approved": True, "by": "demo-reviewer"}), fork, out))

    out.section("6. Compare the two branches")
    d = app.diff_threads(main, fork)
    out.line(f"they part ways at step {d.first_step}, on: {', '.join(d.keys)}")
    out.data("what differs at the end", heads_differ(d.heads, "main", "fork"))

    elapsed = time.monotonic() - started
    out.section(f"Done in {elapsed:.1f}s")
    out.line(f"look at what it left behind in {db}: point plait at it, then ask")
    out.line(f"export PLAIT_DB={db}    (or add --db {db} to each command)")
    commands = [
        "plait threads",
        f"plait history {main}",
        f"plait state {main} --key messages",
        f"plait diff {main} {fork}",
        f"plait export {main} > {main}.jsonl",
        "plait draw plait.cli.demo:build_graph --format ascii",
    ]
    for c in commands:
        out.line(c)
    out.line(f"or browse, diff, fork and answer in a web page: plait studio --db {db} -g plait.cli.demo:build_graph")
    return {
        "db": db,
        "threads": [main, fork],
        "crash_exit_code": code,
        "finished_before_crash": finished,
        "calls_after_resume": calls_after_resume,
        "uploads_after_resume": uploads_after_resume,
        "differs_at_end": list(d.heads.keys),
        "env": {"PLAIT_DB": db},
        "commands": commands,
    }


def heads_differ(d: StateDiff, a: str, b: str) -> dict[str, Any]:
    """Every key whose value differs between two heads, as ``{key: {a: ..., b: ...}}``; of
    two lists, only what follows the items they share (``"same first items": n``), so a
    long chat shows where it forks, not all of it twice."""
    shown: dict[str, Any] = {}
    for key, value in d.removed.items():
        shown[key] = {a: value, b: "(no value)"}
    for key, value in d.added.items():
        shown[key] = {a: "(no value)", b: value}
    for c in d.changed:
        if isinstance(c.before, list | tuple) and isinstance(c.after, list | tuple):
            n = 0
            while n < min(len(c.before), len(c.after)) and c.before[n] == c.after[n]:
                n += 1
            shown[c.key] = {"same first items": n, a: list(c.before[n:]), b: list(c.after[n:])}
        else:
            shown[c.key] = {a: c.before, b: c.after}
    return dict(sorted(shown.items()))


def _finished_task_ids(app: CompiledGraph, thread: str) -> set[str]:
    async def read() -> set[str]:
        checkpointer = await _open_checkpointer(app)
        cp = await checkpointer.aget(thread, namespace=app.namespace)
        return {w.task_id for w in (cp.pending_writes if cp else ()) if w.kind == "result"}

    return asyncio.run(read())


def _run_child(python: str, db: str, thread: str, decision: Mapping[str, Any], out: Reporter) -> int:
    import json
    import subprocess

    cmd = [
        python,
        "-m",
        "plait.cli.demo",
        "crash-child",
        "--db",
        db,
        "--thread",
        thread,
        "--resume",
        json.dumps(decision),
    ]
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:  # lines are shown as the child prints them
        assert proc.stdout is not None
        shown: list[str] = []
        for row in proc.stdout:
            shown.append(row.strip())
            out.line(shown[-1])
        code = proc.wait(timeout=120)
    if code != CRASH_EXIT_CODE:
        raise RuntimeError(f"the crash child exited with {code}, not {CRASH_EXIT_CODE}: " + " | ".join(shown[-5:]))
    return code


def crash_child(db: str, thread: str, resume: Any) -> None:
    """The child: resume the approval and crash hard in the delivery step."""
    global _CRASH_IN_DELIVERY
    _CRASH_IN_DELIVERY = True
    app = open_graph(db)
    assert app.checkpointer is not None
    out = Reporter()
    out.line(f"child {os.getpid()}: resuming {thread} with the approval")
    asyncio.run(_drive(app, Command(resume=resume), thread, out))
    print("the child should have crashed", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    import json

    parser = argparse.ArgumentParser(prog="python -m plait.cli.demo")
    sub = parser.add_subparsers(dest="cmd")
    run = sub.add_parser("run", help="run the demo (what `plait demo` does)")
    run.add_argument("--db", default=DEFAULT_DB)
    child = sub.add_parser("crash-child", help="internal: the process that crashes")
    child.add_argument("--db", required=True)
    child.add_argument("--thread", required=True)
    child.add_argument("--resume", required=True)
    args = parser.parse_args(argv)
    if args.cmd == "crash-child":
        crash_child(args.db, args.thread, json.loads(args.resume))
        return 1
    run_demo(getattr(args, "db", DEFAULT_DB))
    return 0


if __name__ == "__main__":
    sys.exit(main())
