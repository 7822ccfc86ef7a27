"""What the command-line tests share: the real ``plait`` console script, run in a
subprocess in a fresh folder, its exit code and output checked.

A module of its own, imported as ``from ._cli_support import ...``, rather than names in
conftest.py: pytest imports that for the fixtures, and a test reads what it needs from here.

``cli`` runs ``.venv/bin/plait`` (the console script pip installed, so the entry point is
tested too), or ``python -m plait`` where there is none. ``$PLAIT_DB`` is removed from the
environment unless a test sets it.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
SCHEMAS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli-schemas"
SCRIPT = pathlib.Path(sys.executable).with_name("plait")

FLOW = textwrap.dedent(
    """
    from plait import END, START, AppendList, Graph, StateSchema, interrupt

    schema = StateSchema.builder().add("log", AppendList()).add_lww("topic").add_lww("answer").build()

    def greet(state):
        return {"log": [f"hello {state['topic']}"]}

    def check(state):
        print("check printed this")
        if state["topic"] == "bad":
            raise ValueError("bad topic")
        return {"log": ["checked"]}

    def ask(state):
        answer = interrupt({"question": f"publish {state['topic']}?"})
        return {"answer": answer, "log": ["asked"]}

    graph = Graph(schema)
    graph.add_node("greet", greet).add_node("check", check)
    graph.add_edge(START, "greet").add_edge("greet", "check").add_edge("check", END)

    def with_question():
        g = Graph(schema)
        g.add_node("greet", greet).add_node("ask", ask)
        g.add_edge(START, "greet").add_edge("greet", "ask").add_edge("ask", END)
        return g

    compiled = graph.compile()
    paused = graph.compile(interrupt_before=["check"], checkpointer="memory:")
    """
)
"""A graph module: ``graph`` runs greet then check (which fails on topic "bad"),
``compiled`` is it compiled, ``with_question`` pauses on an interrupt, ``paused`` (compiled
with a store of its own) stops at a breakpoint before check."""


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.out.strip(), f"no stdout; stderr: {self.err}"
        return json.loads(self.out)

    def error(self) -> dict[str, Any]:
        """The JSON error object: the last line on stderr (with --json; what a node printed
        may come before it)."""
        lines = self.err.strip().splitlines()
        assert lines and "Traceback" not in self.err, self.err
        value = json.loads(lines[-1])
        assert isinstance(value, dict)
        return value

    def one_line(self) -> str:
        """The one error line on stderr (never a traceback), after a confirmation question."""
        lines = [line for line in self.err.strip().splitlines() if not line.rstrip().endswith("[y/N]")]
        assert len(lines) == 1, self.err
        assert "Traceback" not in self.err
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


def command() -> list[str]:
    """The console script, or ``python -m plait`` where pip installed none."""
    return [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "plait"]


class Cli:
    """The console script, run in ``folder``."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.env = {k: v for k, v in os.environ.items() if k != "PLAIT_DB"}
        self.env["PYTHONPATH"] = str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")
        self.env["COLUMNS"] = "200"  # help text on one line per option
        self.env["TERM"] = "dumb"

    def __call__(self, *args: str, stdin: str = "", env: Mapping[str, str] | None = None) -> Result:
        done = subprocess.run(
            [*command(), *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=self.folder,
            env={**self.env, **(env or {})},
            timeout=120,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def many(self, *calls: Sequence[str]) -> list[Result]:
        """Several invocations that do not depend on each other (help pages, reads), run at
        once: each is still the real console script in its own process."""
        procs = [
            subprocess.Popen(
                [*command(), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=self.folder,
                env=self.env,
            )
            for args in calls
        ]
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            results.append(Result(p.returncode, out, err))
        return results

    def write(self, name: str, text: str) -> pathlib.Path:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path


def lines_of(stream: IO[str]) -> queue.Queue[str]:
    """Each line ``stream`` prints, as it prints it (read in a thread of its own)."""
    q: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            q.put(line.rstrip("\n"))
        q.put("<eof>")

    threading.Thread(target=read, daemon=True).start()
    return q


def expect(q: queue.Queue[str], text: str, seen: list[str]) -> str:
    """The first line holding ``text`` (every line read is kept in ``seen``)."""
    while True:
        line = q.get(timeout=60)
        seen.append(line)
        assert line != "<eof>", f"watch ended before printing {text!r}: {seen}"
        if text in line:
            return line
