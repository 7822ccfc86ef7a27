"""Crash-test plumbing: the child launcher (a forking zygote, or plain subprocesses where
``os.fork`` is unavailable) and the graph module the children run."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Protocol

import pytest

HERE = Path(__file__).resolve().parent
CHILD = HERE / "crash_child.py"

HANG_LIMIT = 60.0
"""Seconds before a child that is not being killed on purpose counts as hung (as in crash_child)."""

collect_ignore = ["crash_child.py"]


def _load_child_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plait_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def crash_child() -> ModuleType:
    """tests/crash/crash_child.py, imported (the graph, its invariants, open_checkpointer)."""
    return _load_child_module()


@dataclass(frozen=True, slots=True)
class Outcome:
    pid: int
    killed: bool
    """The child died of our SIGKILL (it had not exited when the delay ran out)."""
    status: int
    """The raw wait status."""
    hung: bool = False
    """Not killed on purpose, it ran past crash_child.HANG_LIMIT and was killed."""

    @property
    def exit_code(self) -> int | None:
        return os.waitstatus_to_exitcode(self.status) if os.WIFEXITED(self.status) else None

    def describe(self) -> str:
        if os.WIFSIGNALED(self.status):
            return f"pid {self.pid} killed by signal {os.WTERMSIG(self.status)}"
        return f"pid {self.pid} exited with {self.exit_code}"


class Launcher(Protocol):
    def run(self, args: Mapping[str, Any], delay: float | None) -> Outcome:
        """Run one child with ``args``; SIGKILL it after ``delay`` seconds if still running."""
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
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), "zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=_child_env(),
            text=True,
            bufsize=1,
        )
        self._expect("ready")

    def _expect(self, word: str) -> list[str]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        parts = line.split()
        if not parts or parts[0] != word:
            raise RuntimeError(f"zygote said {line!r}, expected {word!r} (exit code {self.proc.poll()})")
        return parts

    def run(self, args: Mapping[str, Any], delay: float | None) -> Outcome:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "run", "args": dict(args), "delay": delay}) + "\n")
        self.proc.stdin.flush()
        pid = int(self._expect("pid")[1])
        _, got, killed, hung, status = self._expect("exit")
        assert int(got) == pid
        return Outcome(pid=pid, killed=killed == "1", status=int(status), hung=hung == "1")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Spawner:
    """The fallback: one fresh interpreter per run (slower: it imports plait every time)."""

    def __init__(self, stderr: IO[bytes]) -> None:
        self.stderr = stderr

    def run(self, args: Mapping[str, Any], delay: float | None) -> Outcome:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), "once", json.dumps(dict(args))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=_child_env(),
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # "ready" once imported (or EOF if it died): the delay counts from here
        proc.stdout.close()
        killed = hung = False
        try:
            proc.wait(timeout=HANG_LIMIT if delay is None else delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)  # Popen has not reaped it: the pid is still ours
            killed, hung = delay is not None, delay is None
        code = proc.wait()
        status = -code if code < 0 else code << 8
        return Outcome(pid=proc.pid, killed=killed and code == -signal.SIGKILL, status=status, hung=hung)

    def close(self) -> None:
        pass


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """A zygote when this platform can fork, else (or with PLAIT_CRASH_LAUNCHER=spawn) one
    fresh process per run. The children's stderr goes to ``tmp_path/children.err`` (shown
    when a child fails)."""
    err = (tmp_path / "children.err").open("wb")
    spawn = os.environ.get("PLAIT_CRASH_LAUNCHER") == "spawn" or not hasattr(os, "fork")
    chosen: Launcher = Spawner(err) if spawn else Zygote(err)
    try:
        yield chosen
    finally:
        chosen.close()
        err.close()
