"""The graph the crash tests kill, and the process that runs it (not a test module).

Run as a script, this file is a *zygote*: it imports plait and this graph once, opens no
database and starts no thread, then serves commands on a control socket (its one argument
is the socket's file descriptor): one JSON object per line, to which the test attaches the
child's *event socket* (see below) when the command is ``run``. For each ``run`` it forks a
child, which opens the store, runs the graph and leaves with ``os._exit`` (0: the run
finished; 1: it failed, traceback on stderr). The zygote answers ``pid <pid>`` right after
the fork and ``exit <pid> <wait status>`` once it has reaped the child; ``signal`` commands
(the test's kills, stops and continues) are sent by the zygote, which alone reaps the child,
so the pid cannot have been reused by then. It answers each with ``signalled <pid>``, after
the child has stopped when the signal was SIGSTOP.

``python crash_child.py once '<json args>'`` runs one child in a plain process instead (the
fallback where ``os.fork`` is unavailable); the test passes the event socket to it as an
inherited file descriptor.

**Events.** A child reports what it reaches on its event socket, one JSON :class:`Event`
per line, each sent before the child goes on: ``ready`` (the store is open), ``node`` (a
node started), ``effect`` (a ``once`` effect ran, its result not yet recorded),
``recorded`` (``once`` returned: the result is stored), ``commit`` (a checkpointer commit
returned), then ``done`` (``invoke`` returned and the result file is written) or
``failed``. The test arms *pauses* (:class:`At` triggers, in the ``pauses`` argument): the
first event that matches an armed trigger disarms it and is sent with the trigger, and the
thread that reported it then waits for the test's answer (one line) while the child's other
threads go on. Holding the child there is what lets the test kill or stop it exactly at
that event, however loaded the machine is.

Every node start and every ``once`` effect also appends one line to the *ledger* file
(opened with ``O_APPEND``, one ``write`` per line), so the test can see what ran when,
whether or not the child lived to report it. Not fsync'd: a line is in the kernel once its
``write`` returned, and a SIGKILL cannot take it back (only a machine crash could).

With ``"mode": "chat"`` in its arguments a child runs the chat graph instead: one node that
appends one message per step for ``CHAT_STEPS`` steps, a list long enough for the SQL stores
to link its chain through several anchors (see ``plait.checkpoint.delta.encode_linked``).
With ``"mode": "sub"`` it runs the subgraph graph: a parent whose middle node is a subgraph
looping ``SUB_STEPS`` steps in its own namespace of the thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plait import END, START, AppendList, Checkpointer, Graph, LastWriteWins, NodeContext, StateSchema, Sum
from plait.checkpoint.model import CheckpointWrite, Fence, WritesBatch
from plait.errors import ThreadBusyError

ROUNDS = 12
"""The loop runs plan -> 3 workers -> reduce this many times."""
CHAT_STEPS = 60
"""The chat graph appends this many messages, one per step (~3.7 anchors' worth)."""
CHAT_INPUT: dict[str, Any] = {"messages": []}
WORKERS = ("w0", "w1", "w2")
INPUT: dict[str, Any] = {"topic": "crash"}
LEASE_TTL = 0.1
"""Seconds: a killed child's lease on its thread lapses this soon (the default is 30 s)."""


# -- the protocol between a child and the test -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One thing a child reported reaching."""

    n: int
    """1 for the child's first event, then 2, 3, ... in the order they were sent."""
    kind: str
    """``ready``, ``node``, ``effect``, ``recorded``, ``commit``, ``done`` or ``failed``."""
    step: int | None = None
    """For node, effect and recorded: the step of the checkpoint the task started from."""
    steps: tuple[int, ...] = ()
    """For commit: the steps of the checkpoints it stored (none for pending writes alone)."""
    writes: int = 0
    """For commit: how many pending writes it stored."""
    node: str | None = None
    task: str | None = None
    errors: tuple[str, ...] = ()
    """For failed: the class names of the exception and of its causes, outermost first,
    each followed by its bases (``NodeError RunError PlaitError Exception ...``), then
    ``|`` between exceptions."""
    message: str = ""
    """For failed: ``str()`` of the exception."""
    trigger: Mapping[str, Any] | None = None
    """The armed trigger this event matched: the child waits for the test's answer."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        fields = dict(data)
        fields["steps"] = tuple(fields.get("steps", ()))
        fields["errors"] = tuple(fields.get("errors", ()))
        return cls(**fields)

    def to_json(self) -> dict[str, Any]:
        """The fields that differ from their defaults (as the child sends them)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.default is dataclasses.MISSING or getattr(self, f.name) != f.default
        }

    def __str__(self) -> str:
        where = [
            f"step {self.step}" if self.step is not None else "",
            f"steps {list(self.steps)}" if self.steps else "",
            f"node {self.node}" if self.node else "",
            f"{self.writes} writes" if self.writes else "",
        ]
        text = f"#{self.n} {self.kind} " + ", ".join(w for w in where if w)
        return text + (f": {self.message}" if self.message else "")


def matches(trigger: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether ``event`` (an Event's JSON) has every field of ``trigger``; a trigger's
    ``step`` also matches a commit that stored a checkpoint of that step."""
    for key, want in trigger.items():
        if key == "step" and want in event.get("steps", ()):
            continue
        if event.get(key) != want:
            return False
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class At:
    """A point in a child's run: the first event that has every field given here.

    ``At(kind="commit", step=17)``: right after the commit that stored checkpoint 17 returned;
    ``At(kind="node", step=4, node="w1")``: as w1 starts from checkpoint 4;
    ``At(step=5)``: whichever comes first of checkpoint 5's commit and a task starting from it.
    """

    kind: str | None = None
    step: int | None = None
    node: str | None = None
    n: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def matches(self, event: Event) -> bool:
        return matches(self.to_json(), event.to_json())

    def __str__(self) -> str:
        return "At(" + ", ".join(f"{k}={v!r}" for k, v in self.to_json().items()) + ")"


class Reporter:
    """The child's end of the event socket (see the module docstring)."""

    def __init__(self, sock: socket.socket, pauses: Sequence[Mapping[str, Any]]) -> None:
        self._sock = sock
        self._armed = [dict(p) for p in pauses]
        self._n = 0
        self._sending = threading.Lock()
        """Held from numbering an event to sending it: events go out in order."""
        self._waiting = threading.Lock()
        """Held by a thread waiting for an answer; the others go on, reporting as they go."""
        self._unread = b""

    def report(self, kind: str, **fields: Any) -> None:
        with self._sending:
            self._n += 1
            event = {"n": self._n, "kind": kind, **fields}
            hit = next((t for t in self._armed if matches(t, event)), None)
            if hit is not None:
                self._armed.remove(hit)
                event["trigger"] = hit
            self._sock.sendall((json.dumps(event) + "\n").encode())
        if hit is not None:
            with self._waiting:  # answers come in the order of the pauses; any one will do
                self._await_answer()

    def _await_answer(self) -> None:
        while b"\n" not in self._unread:
            got = self._sock.recv(4096)
            if not got:  # the test is gone: nobody will ever answer
                os._exit(3)
            self._unread += got
        _, self._unread = self._unread.split(b"\n", 1)


_ledger_fd: int | None = None
_reporter: Reporter | None = None


def log(line: str) -> None:
    """Append one line to the ledger: one O_APPEND write (no-op without a ledger)."""
    if _ledger_fd is None:
        return
    os.write(_ledger_fd, (line + "\n").encode())


def report(kind: str, **fields: Any) -> None:
    """Send an event to the test, and wait there if it armed a pause for it (no-op without
    an event socket: the in-process reference run)."""
    if _reporter is not None:
        _reporter.report(kind, **fields)


def _started(ctx: NodeContext) -> None:
    log(f"start {ctx.task_id}")
    report("node", step=ctx.step, node=ctx.node, task=ctx.task_id)


# -- the graphs ----------------------------------------------------------------------------------


def schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add("topic", LastWriteWins())
        .add("round", LastWriteWins(), default=-1)
        .add("items", AppendList())
        .add("charges", AppendList())
        .add("rounds", AppendList())
        .add("counter", Sum(), default=0)
        .build()
    )


def _plan(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    _started(ctx)
    return {"round": state["counter"]}


def _worker(name: str, nap: float) -> Callable[[Mapping[str, Any], NodeContext], dict[str, Any]]:
    def worker(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        _started(ctx)
        time.sleep(nap)
        rnd = state["round"]

        def charge() -> dict[str, Any]:
            log(f"effect {ctx.task_id}")
            report("effect", step=ctx.step, node=ctx.node, task=ctx.task_id)
            return {"worker": name, "round": rnd}

        got = ctx.once("charge", charge)
        report("recorded", step=ctx.step, node=ctx.node, task=ctx.task_id)
        time.sleep(nap)
        return {"items": [f"{name}:{rnd}"], "charges": [f"{got['worker']}:{got['round']}"]}

    worker.__name__ = name
    return worker


def _reduce(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    _started(ctx)
    time.sleep(0.002)
    return {"counter": 1, "rounds": [state["round"]]}


def _after_plan(state: Mapping[str, Any]) -> list[str]:
    return list(WORKERS)


def _after_reduce(state: Mapping[str, Any]) -> str:
    return "plan" if state["counter"] < ROUNDS else END


def build_graph() -> Graph:
    """plan fans out to three sync workers (each with a ``once`` effect), a join runs
    reduce, which loops back to plan until the counter reaches ROUNDS."""
    g = Graph(schema())
    g.add_node("plan", _plan)
    for i, name in enumerate(WORKERS):
        g.add_node(name, _worker(name, 0.001 * (i + 1)))
    g.add_node("reduce", _reduce)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", _after_plan)
    g.add_edge(list(WORKERS), "reduce")
    g.add_conditional_edges("reduce", _after_reduce)
    return g


def chat_message(i: int) -> dict[str, Any]:
    """The ``i``-th message of the chat graph (~300 bytes: its deltas are rows, not kept in bodies)."""
    return {"id": f"m{i}", "text": f"{i:04d} " + "lorem ipsum " * 25}


def _say(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    _started(ctx)
    time.sleep(0.002)
    return {"messages": [chat_message(len(state["messages"]))]}


def build_chat_graph() -> Graph:
    """``say`` appends one message and loops to itself until there are CHAT_STEPS."""
    g = Graph(StateSchema.builder().add("messages", AppendList()).build())
    g.add_node("say", _say)
    g.add_edge(START, "say")
    g.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < CHAT_STEPS else END)
    return g


SUB_STEPS = 10
"""The subgraph graph's inner loop appends this many messages, one per step of the subgraph."""


def _note(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    _started(ctx)
    return {"messages": [f"{ctx.node}:{len(state['messages'])}"]}


def build_sub_graph() -> Graph:
    """The parent's ``research`` node is a subgraph (``say`` looping SUB_STEPS times, a chat
    graph of its own), between two plain nodes: ``before`` and ``fin``."""
    inner = Graph(StateSchema.builder().add("messages", AppendList()).build())
    inner.add_node("say", _say)
    inner.add_edge(START, "say")
    inner.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < SUB_STEPS + 1 else END)
    g = Graph(StateSchema.builder().add("messages", AppendList()).build())
    g.add_node("before", _note).add_node("research", inner.compile()).add_node("fin", _note)
    g.add_edge(START, "before").add_edge("before", "research").add_edge("research", "fin")
    return g


MEMORY_ROUNDS = 6
"""The memory graph's loop runs this many rounds."""


def _mem_worker(name: str) -> Callable[[Mapping[str, Any], NodeContext], dict[str, Any]]:
    def worker(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        _started(ctx)
        rnd = state["round"]
        ctx.store.put(
            ("work", ctx.thread_id or ""), f"{rnd}-{name}", {"round": rnd, "worker": name, "pid": os.getpid()}
        )
        time.sleep(0.001)
        return {"items": [f"{name}:{rnd}"]}

    worker.__name__ = name
    return worker


def _mem_reduce(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    _started(ctx)
    # read-modify-write of one memory: applied twice (or without its step), the list would
    # hold a round twice, or one the state does not
    ns = ("count", ctx.thread_id or "")
    item = ctx.store.get(ns, "rounds")
    rounds = list(item.value["rounds"]) if item is not None else []
    ctx.store.put(ns, "rounds", {"rounds": [*rounds, state["round"]]})
    return {"counter": 1, "rounds": [state["round"]]}


def build_memory_graph() -> Graph:
    """The loop graph's shape (plan, three workers, reduce) whose workers each save a memory
    and whose reduce updates one, for MEMORY_ROUNDS rounds: the memory must always be what
    the committed state says (see memory_agrees)."""
    g = Graph(schema())
    g.add_node("plan", _plan)
    for name in WORKERS:
        g.add_node(name, _mem_worker(name))
    g.add_node("reduce", _mem_reduce)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", _after_plan)
    g.add_edge(list(WORKERS), "reduce")
    g.add_conditional_edges("reduce", lambda s: "plan" if s["counter"] < MEMORY_ROUNDS else END)
    return g


def memory_agrees(values: Mapping[str, Any], store: Any, thread: str) -> None:
    """The memory store holds exactly what the committed state ``values`` says its steps
    wrote: one item per worker item, and the reduce's rounds (AssertionError if not)."""
    work = {i.key for i in store.search(("work", thread), limit=1000)}
    items = list(values.get("items", []))
    assert work == {f"{i.split(':')[1]}-{i.split(':')[0]}" for i in items}, f"work memory {sorted(work)} != {items}"
    item = store.get(("count", thread), "rounds")
    rounds = list(values.get("rounds", []))
    if not rounds:
        assert item is None, f"rounds memory {item} before any round was committed"
    else:
        assert item is not None and item.value["rounds"] == rounds, f"rounds memory {item} != state {rounds}"


def expected_items(rounds: int) -> list[str]:
    return [f"{w}:{r}" for r in range(rounds) for w in WORKERS]


def check_values(values: Mapping[str, Any]) -> None:
    """The invariants every committed checkpoint of this graph satisfies (AssertionError if not)."""
    counter = values.get("counter", 0)
    rounds = list(values.get("rounds", []))
    items = list(values.get("items", []))
    charges = list(values.get("charges", []))
    assert values.get("topic") == INPUT["topic"], values
    assert counter == len(rounds), f"counter {counter} != {len(rounds)} rounds: {values}"
    assert rounds == list(range(counter)), f"rounds out of order: {values}"
    assert len(items) in (3 * counter, 3 * counter + 3), f"{len(items)} items for counter {counter}: {values}"
    assert items == expected_items(counter + 1)[: len(items)], f"items wrong: {values}"
    assert charges == items, f"recorded charges differ from items: {values}"


# -- the child -----------------------------------------------------------------------------------


def _reporting(cls: type[Checkpointer]) -> type[Checkpointer]:
    """``cls`` with every commit reported once it returned (the engine's one write path)."""

    class Reporting(cls):  # type: ignore[misc, valid-type]
        async def acommit(
            self,
            *,
            checkpoints: Sequence[CheckpointWrite] = (),
            writes: Sequence[WritesBatch] = (),
            fence: Fence | None = None,
            memory: Any = (),
        ) -> None:
            await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)
            report(
                "commit",
                steps=[cw.checkpoint.step for cw in checkpoints],
                writes=sum(len(batch.writes) for batch in writes),
            )

    Reporting.__name__ = Reporting.__qualname__ = f"Reporting{cls.__name__}"
    return Reporting


def open_checkpointer(
    backend: str, store: str, pg_schema: str | None = None, *, reporting: bool = False, **options: Any
) -> Checkpointer:
    """A checkpointer on ``store``: a SQLite file, a FileCheckpointer folder or a Postgres DSN;
    with ``reporting``, one that reports its commits as events."""
    cls: type[Checkpointer]
    if backend == "sqlite":
        from plait.checkpoint.sqlite import SqliteCheckpointer as cls
    elif backend == "file":
        from plait.checkpoint.file import FileCheckpointer as cls
    elif backend == "postgres":
        from plait.checkpoint.postgres import PostgresCheckpointer as cls

        options["schema"] = pg_schema
    else:
        raise ValueError(f"unknown backend {backend!r}")
    make: Callable[..., Checkpointer] = _reporting(cls) if reporting else cls  # each backend's own arguments
    return make(store, **options)


def _close(saver: Checkpointer) -> None:
    from plait._sync import run_sync

    run_sync(saver.aclose())


def run_child(args: Mapping[str, Any]) -> int:
    """Run (or resume) the graph on one thread; 0 when the run finished."""
    global _ledger_fd
    _ledger_fd = os.open(args["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    options = {"connect_timeout": args["connect_timeout"]} if "connect_timeout" in args else {}
    saver = open_checkpointer(args["backend"], args["store"], args.get("pg_schema"), reporting=True, **options)
    saver.lease_ttl = float(args.get("lease_ttl", LEASE_TTL))
    mode = args.get("mode")
    build = {"chat": build_chat_graph, "sub": build_sub_graph, "memory": build_memory_graph}.get(
        mode or "", build_graph
    )
    graph = build().compile(checkpointer=saver, store=mode == "memory")
    start = (CHAT_INPUT if mode in ("chat", "sub") else INPUT) if args["fresh"] else None
    report("ready")
    give_up = time.monotonic() + 20.0
    while True:
        try:
            out = graph.invoke(start, thread_id=args["thread"], durability=args["durability"])
            break
        except ThreadBusyError:
            # the lease of a killed run on this thread has not lapsed yet
            if time.monotonic() > give_up:
                raise
            time.sleep(0.01)
    tmp = args["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, default=str)
    os.replace(tmp, args["result"])
    report("done")
    _close(saver)
    return 0


def _error_names(exc: BaseException) -> list[str]:
    names: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        names += [*(c.__name__ for c in type(cur).__mro__ if c is not object), "|"]
        cur = cur.__cause__ or cur.__context__
    return names[:-1]


def _child(args: Mapping[str, Any]) -> int:
    global _reporter
    try:
        sock = socket.socket(fileno=args["events_fd"])
        _reporter = Reporter(sock, args.get("pauses", []))
        return run_child(args)
    except BaseException as exc:
        traceback.print_exc()
        sys.stderr.flush()
        with contextlib.suppress(BaseException):
            report("failed", errors=_error_names(exc), message=str(exc))
        return 1


def _preload() -> None:
    """Import everything a child needs, so a fork starts ready to run (no thread starts here)."""
    import asyncio  # noqa: F401
    import concurrent.futures  # noqa: F401
    import sqlite3  # noqa: F401

    for name in ("plait.checkpoint.sqlite", "plait.checkpoint.file", "plait.checkpoint.postgres", "psycopg_pool"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    build_graph()
    build_chat_graph()
    build_sub_graph()
    build_memory_graph()


class _Control:
    """The zygote's end of the control socket: JSON lines in (with the file descriptors the
    test attached), text lines out."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._unread = b""
        self.fds: list[int] = []

    def say(self, line: str) -> None:
        self.sock.sendall((line + "\n").encode())

    def read(self) -> list[dict[str, Any]] | None:
        """The commands that arrived (call when readable); None once the test is gone."""
        data, fds, _, _ = socket.recv_fds(self.sock, 65536, 8)
        if not data:
            return None
        self.fds += fds
        self._unread += data
        *lines, self._unread = self._unread.split(b"\n")
        return [json.loads(line) for line in lines]


class _Watch:
    """The running child of the zygote: tells when it exits, without reaping it early."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None  # no pidfd here: poll with WNOHANG

    def reap(self, blocking: bool) -> int | None:
        """The wait status once the child has exited (reaped then), else None."""
        done, status = os.waitpid(self.pid, 0 if blocking else os.WNOHANG)
        if not done:
            return None
        if self.fd is not None:
            os.close(self.fd)
        return status


def zygote(ctl_fd: int) -> None:
    _preload()
    ctl = _Control(socket.socket(fileno=ctl_fd))
    ctl.say("ready")
    child: _Watch | None = None
    while True:
        watch = [ctl.sock] + ([child.fd] if child is not None and child.fd is not None else [])
        polling = child is not None and child.fd is None
        readable = select.select(watch, [], [], 0.002 if polling else None)[0]
        if child is not None and (child.fd in readable or polling):
            status = child.reap(blocking=not polling)
            if status is not None:
                ctl.say(f"exit {child.pid} {status}")
                child = None
        if ctl.sock not in readable:
            continue
        commands = ctl.read()
        if commands is None:
            return
        for cmd in commands:
            if cmd["op"] == "quit":
                return
            if cmd["op"] == "signal":
                if child is not None and child.pid == cmd["pid"]:  # not reaped: the pid is still ours
                    os.kill(child.pid, cmd["signal"])
                    if cmd["signal"] == signal.SIGSTOP:
                        os.waitid(os.P_PID, child.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
                ctl.say(f"signalled {cmd['pid']}")
                continue
            assert cmd["op"] == "run" and child is None, cmd
            events_fd = ctl.fds.pop(0)
            pid = os.fork()
            if pid == 0:  # the child
                code = 1
                try:
                    ctl.sock.close()
                    code = _child({**cmd["args"], "events_fd": events_fd})
                finally:
                    os._exit(code)
            os.close(events_fd)
            child = _Watch(pid)
            ctl.say(f"pid {pid}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "zygote":
        zygote(int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "once":
        _preload()
        sys.exit(_child(json.loads(sys.argv[2])))
    else:
        sys.exit("usage: crash_child.py zygote <control fd> | once '<json args>'")
