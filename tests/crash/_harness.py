"""The crash tests' harness: the child launcher (a forking zygote, or plain subprocesses where
``os.fork`` is unavailable), kills and stops timed by the events a child reports (see
crash_child.py), the stores the children write, and the uninterrupted reference run.

How a test asks for a kill (``At`` comes from crash_child, reached through the
``crash_child`` fixture)::

    launcher.run(args)                                   # to the end
    launcher.run(args, kill=At(kind="commit", step=17))  # right after checkpoint 17 is stored
    launcher.run(args, kill=At(step=5), delay=0.003, at_latest=At(step=6))
        # 3 ms after step 5 began, or as step 6 begins if that comes first

and for a stall::

    with launcher.stalled(args, at=At(kind="node", node="w1")) as stall:
        ...  # the child is SIGSTOPped at that event; another process may act meanwhile
    stall.outcome.exit_code, stall.reported_after  # after SIGCONT, once it ended

(``launcher.held`` is the same without SIGSTOP: only the thread that reported the event
waits, the rest of the child goes on.)

A kill at an event lands while the child waits at that event (crash_child's pauses), so no
kill depends on how fast a loaded machine runs the child; the time a test waits for an
event is bounded by ``HANG_LIMIT`` and passing it fails the test, saying where it waited.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Protocol

from plait import Checkpointer, MemoryCheckpointer, thaw
from plait._sync import run_sync

HERE = Path(__file__).resolve().parent
CHILD = HERE / "crash_child.py"

HANG_LIMIT = 60.0
"""Seconds a child may run (stops excluded) before it counts as hung: it is killed and the
test fails. Generous: a whole run takes well under a second on an idle machine."""


def _load_child_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plait_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


child_module = _load_child_module()
At = child_module.At
Event = child_module.Event


# -- processes -----------------------------------------------------------------------------------


class _Lines:
    """Lines read from a socket, each within a deadline (``time.monotonic()`` seconds)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._unread = b""

    def readline(self, deadline: float) -> str | None:
        """The next line; None at end of stream (a torn last line is dropped: its writer died
        writing it). Raises TimeoutError when the deadline passes first."""
        while b"\n" not in self._unread:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError
            try:
                got = self.sock.recv(65536)
            except ConnectionResetError:  # the writer died before it read what we sent it
                got = b""
            if not got:
                return None
            self._unread += got
        line, self._unread = self._unread.split(b"\n", 1)
        return line.decode()


class Processes(Protocol):
    """How children are made: they get ``args`` and the child's end of an event socket."""

    def start(self, args: Mapping[str, Any], events: socket.socket) -> int:
        """Start a child; its pid."""
        ...

    def signal(self, pid: int, sig: int) -> None:
        """Signal the child unless it was reaped; returns once it has stopped, for SIGSTOP."""
        ...

    def wait(self, pid: int, deadline: float) -> int:
        """Reap the child; its raw wait status (TimeoutError when the deadline passes)."""
        ...

    def close(self) -> None: ...


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class Zygote:
    """One pre-imported helper process that forks a child per run (see crash_child.py)."""

    def __init__(self, stderr: IO[bytes]) -> None:
        mine, theirs = socket.socketpair()
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), "zygote", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=_child_env(),
            )
        self.ctl = _Lines(mine)
        self._exits: dict[int, int] = {}
        """Exit statuses the zygote reported while another answer was awaited."""
        self._expect("ready")

    def _send(self, command: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
        socket.send_fds(self.ctl.sock, [(json.dumps(command) + "\n").encode()], list(fds))

    def _expect(self, word: str, deadline: float | None = None) -> list[str]:
        while True:
            try:
                line = self.ctl.readline(time.monotonic() + HANG_LIMIT if deadline is None else deadline)
            except TimeoutError:
                raise TimeoutError(f"the zygote did not say {word!r} in time") from None
            if line is None:
                raise RuntimeError(f"the zygote exited (code {self.proc.wait()}) before saying {word!r}")
            parts = line.split()
            if parts[0] == "exit" and word != "exit":
                self._exits[int(parts[1])] = int(parts[2])
                continue
            if parts[0] != word:
                raise RuntimeError(f"the zygote said {line!r}, expected {word!r}")
            return parts

    def start(self, args: Mapping[str, Any], events: socket.socket) -> int:
        self._send({"op": "run", "args": dict(args)}, [events.fileno()])
        return int(self._expect("pid")[1])

    def signal(self, pid: int, sig: int) -> None:
        self._send({"op": "signal", "pid": pid, "signal": int(sig)})
        self._expect("signalled")

    def wait(self, pid: int, deadline: float) -> int:
        if pid not in self._exits:
            _, got, status = self._expect("exit", deadline)
            assert int(got) == pid, f"the zygote reaped {got}, not {pid}"
            return int(status)
        return self._exits.pop(pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self._send({"op": "quit"})
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.ctl.sock.close()


class Spawner:
    """The fallback: one fresh interpreter per run (slower: it imports plait every time)."""

    def __init__(self, stderr: IO[bytes]) -> None:
        self.stderr = stderr
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, args: Mapping[str, Any], events: socket.socket) -> int:
        fd = events.fileno()
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), "once", json.dumps({**args, "events_fd": fd})],
            pass_fds=[fd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            env=_child_env(),
        )
        self.procs[proc.pid] = proc
        return proc.pid

    def signal(self, pid: int, sig: int) -> None:
        proc = self.procs[pid]
        proc.send_signal(sig)  # a no-op once Popen has reaped it: never another process
        if sig == signal.SIGSTOP and proc.returncode is None:
            os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)

    def wait(self, pid: int, deadline: float) -> int:
        try:
            code = self.procs[pid].wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"pid {pid} did not exit in time") from None
        del self.procs[pid]
        return -code if code < 0 else code << 8

    def close(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


# -- one child, and what became of it ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a child ended, and everything it reported."""

    pid: int
    status: int
    """The raw wait status."""
    events: tuple[Any, ...]
    """The Events it reported, in order."""
    killed: bool = False
    """It died of the SIGKILL the test asked for."""
    killed_at: Any = None
    """The Event it was held at when killed; None when the kill landed while it ran."""
    hung: bool = False
    """It ran past HANG_LIMIT and was killed for that."""

    @property
    def exit_code(self) -> int | None:
        return os.waitstatus_to_exitcode(self.status) if os.WIFEXITED(self.status) else None

    @property
    def failure(self) -> Any:
        """The ``failed`` Event, if the run raised."""
        return next((e for e in self.events if e.kind == "failed"), None)

    def describe(self) -> str:
        if os.WIFSIGNALED(self.status):
            how = f"pid {self.pid} killed by signal {os.WTERMSIG(self.status)}"
        else:
            how = f"pid {self.pid} exited with {self.exit_code}"
        last = "; ".join(str(e) for e in self.events[-4:])
        return f"{how}{' (hung)' if self.hung else ''}, {len(self.events)} events, the last: {last or 'none'}"


class _Child:
    """A running child: its events as they come, and the signals the test sends it."""

    def __init__(self, procs: Processes, args: Mapping[str, Any], pauses: Sequence[Any], timeout: float) -> None:
        self.procs = procs
        mine, theirs = socket.socketpair()
        with theirs:  # from here on only the child holds it: end of stream means it is gone
            self.pid = procs.start({**args, "pauses": [p.to_json() for p in pauses]}, theirs)
        self._in = _Lines(mine)
        self.events: list[Any] = []
        self.deadline = time.monotonic() + timeout
        self.hung = self.ended = self.killed = False

    def next_pause(self, until: float | None = None) -> Any:
        """Read events up to the next one the child waits at (returned); None when the child
        ended first, or was killed because it ran past its deadline (then ``hung``). Raises
        TimeoutError when ``until`` passes first."""
        while not self.ended:
            limit = self.deadline if until is None else min(until, self.deadline)
            try:
                line = self._in.readline(limit)
            except TimeoutError:
                if until is not None and until < self.deadline:
                    raise
                if self.hung:  # killed, and still no end of stream: stop reading
                    break
                self.hung = True
                self.kill()
                self.deadline = time.monotonic() + 10.0  # to read what it sent before it died
                continue
            if line is None:
                self.ended = True
                break
            event = Event.from_json(json.loads(line))
            self.events.append(event)
            if event.trigger is not None:
                return event
        return None

    def answer(self) -> None:
        """Let the child go on from the event it waits at."""
        with contextlib.suppress(OSError):  # it may be dead already
            self._in.sock.sendall(b"go\n")

    def kill(self) -> None:
        self.procs.signal(self.pid, signal.SIGKILL)
        self.killed = True

    def signal(self, sig: int) -> None:
        self.procs.signal(self.pid, sig)

    def finish(self, killed_at: Any = None) -> Outcome:
        """Read what is left (answering pauses nobody asked to kill at), reap the child."""
        while self.next_pause() is not None:
            self.answer()
        self._in.sock.close()
        status = self.procs.wait(self.pid, time.monotonic() + HANG_LIMIT)
        killed = self.killed and not self.hung and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        return Outcome(
            pid=self.pid,
            status=status,
            events=tuple(self.events),
            killed=killed,
            killed_at=killed_at if killed else None,
            hung=self.hung,
        )


@dataclass(kw_only=True)
class Stall:
    """A child held at an event, stopped (SIGSTOP) or not; see :meth:`Launcher.stalled`."""

    pid: int
    event: Any
    """The Event it was held at."""
    stopped: bool
    """Stopped whole (SIGSTOP), not only the thread that reported the event."""
    stopped_at: float
    """``time.monotonic()`` when it was held."""
    stopped_for: float = 0.0
    """Seconds between then and its release."""
    outcome: Outcome | None = None
    """How it ended once continued (set when the ``with`` block is left, or by :meth:`resume`)."""
    release: Callable[[], None] = lambda: None
    """Continues the child and collects its outcome (set by the launcher)."""

    def resume(self) -> Outcome:
        """Continue the child now, inside the ``with`` block (while the test still holds
        something else, say), and wait until it ended."""
        self.release()
        assert self.outcome is not None
        return self.outcome

    @property
    def reported_after(self) -> tuple[Any, ...]:
        """The Events it reported after it was released."""
        assert self.outcome is not None, "the child is still held"
        return tuple(e for e in self.outcome.events if e.n > self.event.n)


class Launcher:
    """Runs children and kills or stops them at the events they report."""

    def __init__(self, procs: Processes) -> None:
        self.procs = procs

    def run(
        self,
        args: Mapping[str, Any],
        kill: Any = None,
        *,
        delay: float | None = None,
        at_latest: Any = None,
        timeout: float = HANG_LIMIT,
    ) -> Outcome:
        """Run one child with ``args``; SIGKILL it when it reaches the event ``kill`` (an At).

        With ``delay``, the kill comes that many seconds after the event instead (the child
        goes on meanwhile), or as the child reaches ``at_latest`` if that comes first: a kill
        at a moment drawn inside a span of the run. A child that never reaches ``kill`` runs
        to its end; one that runs past ``timeout`` is killed and reported as hung.
        """
        # Both armed from the start: armed only once the child goes on, at_latest could be
        # passed meanwhile by another of its threads. If it comes first, the kill comes there.
        pauses = [p for p in (kill, at_latest if delay is not None else None) if p is not None]
        child = _Child(self.procs, args, pauses, timeout)
        killed_at = child.next_pause()
        if killed_at is not None and delay is not None and killed_at.trigger == kill.to_json():
            child.answer()
            try:
                killed_at = child.next_pause(until=time.monotonic() + delay)
            except TimeoutError:
                killed_at = None
                child.kill()
            else:
                if killed_at is None:  # it ended (or hung) first
                    return child.finish()
        if killed_at is not None:
            child.kill()
        return child.finish(killed_at)

    @contextlib.contextmanager
    def stalled(
        self, args: Mapping[str, Any], at: Any, *, also: Sequence[Any] = (), timeout: float = HANG_LIMIT
    ) -> Iterator[Stall]:
        """Run a child until it reports the event ``at``, SIGSTOP it there (every thread of
        it: its lease renewals too) for the ``with`` block, then SIGCONT it and collect how it
        ended into ``stall.outcome``. If the block raises, the child is killed instead.

        With ``also``, the child is stopped only once its threads have reached those events
        too, each held there (parallel tasks all at a known point: none half-way through
        something when the SIGSTOP lands).

        Raises AssertionError when the child ends (or hangs) without reaching ``at``.
        """
        with self._hold(args, at, stop=True, timeout=timeout, also=also) as stall:
            yield stall

    @contextlib.contextmanager
    def held(self, args: Mapping[str, Any], at: Any, *, timeout: float = HANG_LIMIT) -> Iterator[Stall]:
        """As :meth:`stalled`, but not stopped: only the thread that reported ``at`` waits
        there during the block; the child's other threads (sibling tasks, commits, lease
        renewals) go on."""
        with self._hold(args, at, stop=False, timeout=timeout) as stall:
            yield stall

    @contextlib.contextmanager
    def _hold(
        self, args: Mapping[str, Any], at: Any, *, stop: bool, timeout: float, also: Sequence[Any] = ()
    ) -> Iterator[Stall]:
        child = _Child(self.procs, args, [at, *also], timeout)
        held = []
        for _ in range(1 + len(also)):
            reached = child.next_pause()
            if reached is None:
                raise AssertionError(f"the child never reached {[at, *also]}: {child.finish().describe()}")
            held.append(reached)
        event = next((e for e in held if e.trigger == at.to_json()), held[0])
        if stop:
            child.signal(signal.SIGSTOP)
            if args.get("backend") == "sqlite" and args.get("store"):
                _stop_outside_a_write(child, str(args["store"]))
        stall = Stall(pid=child.pid, event=event, stopped=stop, stopped_at=time.monotonic())

        def release() -> None:
            if stall.outcome is not None:
                return
            stall.stopped_for = time.monotonic() - stall.stopped_at
            for _ in held:
                child.answer()
            if stop:
                child.signal(signal.SIGCONT)
            child.deadline = time.monotonic() + timeout
            stall.outcome = child.finish()

        stall.release = release
        try:
            yield stall
        except BaseException:
            if stall.outcome is None:
                child.kill()
                child.finish()
            raise
        release()


def _stop_outside_a_write(child: _Child, path: str) -> None:
    """Make sure the stopped child holds no SQLite write lock. Its other threads run until
    the stop (a lease renewal, a sibling's commit), and one stopped inside its transaction
    would hold the file's lock for the whole stall: every other process's write then fails
    with "database is locked", a stall no test here means (they hold runs at a node's start,
    between transactions). Let it run on for a moment and stop it again until the lock is free."""
    for _ in range(500):
        if _write_lock_free(path):
            return
        child.signal(signal.SIGCONT)
        time.sleep(0.002)
        child.signal(signal.SIGSTOP)
    raise AssertionError(f"the child {child.pid} kept {path}'s write lock through 500 stops")


def _write_lock_free(path: str) -> bool:
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            return False
        raise
    finally:
        conn.close()


def open_launcher(err_path: Path) -> Iterator[Launcher]:
    """A launcher for the length of a fixture: children from a zygote when this platform can
    fork, else (or with PLAIT_CRASH_LAUNCHER=spawn) one fresh process each; their stderr goes
    to ``err_path``."""
    err = err_path.open("wb")
    spawn = os.environ.get("PLAIT_CRASH_LAUNCHER") == "spawn" or not hasattr(os, "fork")
    procs: Processes = Spawner(err) if spawn else Zygote(err)
    try:
        yield Launcher(procs)
    finally:
        procs.close()
        err.close()


# -- the stores the children write ---------------------------------------------------------------


@dataclass
class Store:
    """Where the children keep their checkpoints."""

    backend: str
    location: str
    """The SQLite file, the FileCheckpointer folder, or the Postgres DSN the children use."""
    pg_schema: str | None = None
    reader_location: str = ""
    """What the test itself opens (the Postgres DSN without the children's application name)."""
    settled: Callable[[], bool] = lambda: True
    """True once nothing a dead child started can still change the store."""

    def child_args(self) -> dict[str, Any]:
        return {"backend": self.backend, "store": self.location, "pg_schema": self.pg_schema}

    def open(self, *, reader: bool = False) -> Checkpointer:
        where = self.reader_location if reader and self.reader_location else self.location
        saver: Checkpointer = child_module.open_checkpointer(self.backend, where, self.pg_schema)
        return saver

    def settle(self) -> None:
        """Wait until a killed child's last request can no longer land.

        A SIGKILLed Postgres client may have sent a COMMIT the server has not run yet: the
        server finishes it after the client is gone. So after a kill, wait for the server
        sessions of the children (tagged with an application name) to end."""
        for _ in range(5000):
            if self.settled():
                return
            time.sleep(0.002)
        raise AssertionError(f"{self.backend}: a killed child's server session did not end within 10 s")


# -- the uninterrupted run -----------------------------------------------------------------------


@dataclass
class Reference:
    """The loop graph's uninterrupted run, in-process on a MemoryCheckpointer."""

    final: dict[str, Any]
    by_step: dict[int, dict[str, Any]]
    """Step -> the values of that step's checkpoint."""
    nodes_by_step: dict[int, tuple[str, ...]]
    """Step -> the nodes of the tasks that start from that step's checkpoint."""
    checkpoints: int

    def check_thread(self, saver: Checkpointer, thread: str, where: str) -> None:
        """Every checkpoint of ``thread`` in ``saver`` reads back whole (in the history and by
        id), satisfies the graph's invariants and equals this run's at its step, the thread
        is finished, and its final state is this run's."""
        graph = child_module.build_graph().compile(checkpointer=saver)
        history = graph.get_state_history(thread)
        assert len(history) == self.checkpoints, (
            f"{where}: {len(history)} checkpoints, the uninterrupted run made {self.checkpoints}"
        )
        for state in history:
            child_module.check_values(state.values)
            again = graph.get_state(thread, state.checkpoint_id)
            assert again.checkpoint_id == state.checkpoint_id and again.step == state.step
            assert thaw(again.values) == thaw(state.values), f"{where}: checkpoint {state.checkpoint_id} reads two ways"
            assert again.tasks == state.tasks
            assert thaw(state.values) == self.by_step[state.step], (
                f"{where}: step {state.step} differs from the uninterrupted run"
            )
        head = graph.get_state(thread)
        assert head.checkpoint_id == history[0].checkpoint_id and head.next == ()
        assert thaw(head.values) == self.final, f"{where}: final state differs from the uninterrupted run"


def run_reference() -> Reference:
    """The loop graph's uninterrupted run (see :class:`Reference`)."""
    saver = MemoryCheckpointer()
    graph = child_module.build_graph().compile(checkpointer=saver)
    final = thaw(graph.invoke(dict(child_module.INPUT), thread_id="reference"))
    history = run_sync(saver.ahistory("reference"))
    return Reference(
        final=final,
        by_step={cp.step: thaw(cp.values) for cp in history},
        nodes_by_step={cp.step: tuple(t.node for t in cp.next_tasks) for cp in history},
        checkpoints=len(history),
    )
