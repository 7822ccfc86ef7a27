"""The graph the crash tests kill, and the process that runs it (not a test module).

Run as a script, this file is a *zygote*: it imports plait and this graph once, opens no
database and starts no thread, then reads one JSON command per line on stdin and forks a
child per ``run`` command. The child opens the store, runs the graph and leaves with
``os._exit`` (0: the run finished; 1: it failed, traceback on stderr). The zygote prints
``pid <pid>`` right after the fork, SIGKILLs the child after the command's ``delay`` (if it
is still running), reaps it, and prints ``exit <pid> <killed> <hung> <wait status>``.
Killing from the zygote, before it reaps the child, means the pid cannot have been reused.

``python crash_child.py once '<json args>'`` runs one child in a plain process instead (the
fallback where ``os.fork`` is unavailable); it prints ``ready`` once imported, and the kill
delay counts from there.

Every node start and every ``once`` effect appends one line to the *ledger* file (opened
with ``O_APPEND``, one ``write`` per line, fsync'd), so the test can see what ran when.

With ``"mode": "chat"`` in its arguments a child runs the chat graph instead: one node that
appends one message per step for ``CHAT_STEPS`` steps, a list long enough for the SQL stores
to link its chain through several anchors (see ``plait.checkpoint.delta.encode_linked``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from plait import END, START, AppendList, Checkpointer, Graph, LastWriteWins, NodeContext, StateSchema, Sum
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
HANG_LIMIT = 60.0
"""Seconds: a child that is not killed on purpose and runs this long is killed as hung."""

_ledger_fd: int | None = None


def log(line: str) -> None:
    """Append one line to the ledger: one O_APPEND write, fsync'd (no-op without a ledger)."""
    if _ledger_fd is None:
        return
    os.write(_ledger_fd, (line + "\n").encode())
    os.fsync(_ledger_fd)


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
    log(f"start {ctx.task_id}")
    return {"round": state["counter"]}


def _worker(name: str, nap: float) -> Callable[[Mapping[str, Any], NodeContext], dict[str, Any]]:
    def worker(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        log(f"start {ctx.task_id}")
        time.sleep(nap)
        rnd = state["round"]

        def charge() -> dict[str, Any]:
            log(f"effect {ctx.task_id}")
            return {"worker": name, "round": rnd}

        got = ctx.once("charge", charge)
        time.sleep(nap)
        return {"items": [f"{name}:{rnd}"], "charges": [f"{got['worker']}:{got['round']}"]}

    worker.__name__ = name
    return worker


def _reduce(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    log(f"start {ctx.task_id}")
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
    log(f"start {ctx.task_id}")
    time.sleep(0.002)
    return {"messages": [chat_message(len(state["messages"]))]}


def build_chat_graph() -> Graph:
    """``say`` appends one message and loops to itself until there are CHAT_STEPS."""
    g = Graph(StateSchema.builder().add("messages", AppendList()).build())
    g.add_node("say", _say)
    g.add_edge(START, "say")
    g.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < CHAT_STEPS else END)
    return g


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


def open_checkpointer(backend: str, store: str, pg_schema: str | None = None) -> Checkpointer:
    """A checkpointer on ``store``: a SQLite file, a FileCheckpointer folder or a Postgres DSN."""
    if backend == "sqlite":
        from plait.checkpoint.sqlite import SqliteCheckpointer

        return SqliteCheckpointer(store)
    if backend == "file":
        from plait.checkpoint.file import FileCheckpointer

        return FileCheckpointer(store)
    if backend == "postgres":
        from plait.checkpoint.postgres import PostgresCheckpointer

        return PostgresCheckpointer(store, schema=pg_schema)
    raise ValueError(f"unknown backend {backend!r}")


def _close(saver: Checkpointer) -> None:
    from plait._sync import run_sync

    run_sync(saver.aclose())


def run_child(args: Mapping[str, Any]) -> int:
    """Run (or resume) the graph on one thread; 0 when the run finished."""
    global _ledger_fd
    _ledger_fd = os.open(args["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    saver = open_checkpointer(args["backend"], args["store"], args.get("pg_schema"))
    saver.lease_ttl = LEASE_TTL
    chat = args.get("mode") == "chat"
    graph = (build_chat_graph() if chat else build_graph()).compile(checkpointer=saver)
    start = (CHAT_INPUT if chat else INPUT) if args["fresh"] else None
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
    _close(saver)
    return 0


def _child(args: Mapping[str, Any]) -> int:
    try:
        return run_child(args)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        return 1


def _wait(pid: int, delay: float | None) -> tuple[bool, bool, int]:
    """Reap ``pid``; SIGKILL it first if it is still running after ``delay`` seconds (or,
    without a delay, after HANG_LIMIT seconds: then it hung). Returns (killed, hung, status)."""
    limit = HANG_LIMIT if delay is None else delay
    exited = False
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            exited = bool(select.select([fd], [], [], limit)[0])
        finally:
            os.close(fd)
    else:
        deadline = time.monotonic() + limit
        while not exited and time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return False, False, status
            time.sleep(0.0005)
    if not exited:
        os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still ours
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return killed and delay is not None, killed and delay is None, status


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


def zygote() -> None:
    _preload()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                code = _child(cmd["args"])
            finally:
                os._exit(code)
        out.write(f"pid {pid}\n")
        out.flush()
        killed, hung, status = _wait(pid, cmd.get("delay"))
        out.write(f"exit {pid} {int(killed)} {int(hung)} {status}\n")
        out.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["zygote"]:
        zygote()
    elif len(sys.argv) == 3 and sys.argv[1] == "once":
        _preload()
        print("ready", flush=True)  # the kill delay counts from here, as from a fork
        sys.exit(_child(json.loads(sys.argv[2])))
    else:
        sys.exit("usage: crash_child.py zygote | once '<json args>'")
