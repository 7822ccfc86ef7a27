"""The unmodified LangGraph JS SDK (``@langchain/langgraph-sdk``, pinned in
``tests/serve/js/package.json``) against a real ``plait serve``: ``js/sdk_check.mjs`` drives
assistants, threads, streamed runs with rejoin by ``Last-Event-ID``, interrupts, state edits,
history, branches, copies, multitask ``reject``, both kinds of cancel, and the memory store
(``client.store``: refused, saying why, by a server over the file store).

The script holds runs mid-way with the gates of :mod:`tests.serve._serve_support`: it asks
on stdout (``HOLD <gate>``, ``RELEASE <gate>``) and this test, whose process runs the server,
answers ``ok`` on stdin once done. Skipped without ``node`` or ``js/node_modules`` (``npm ci``
in ``tests/serve/js``), unless ``PLAIT_REQUIRE_JS=1`` (set by CI): then that fails.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from plait.checkpoint.address import open as open_store
from plait.serve.app import ServeConfig

from ._serve_support import GATES, served

JS = Path(__file__).parent / "js"
TIMEOUT = 120.0
"""Seconds the whole script may take."""

CHECKS = (
    "assistants.search",
    "threads.create",
    "runs.stream",
    "runs.joinStream with Last-Event-ID",
    "interrupt and resume",
    "threads.updateState",
    "threads.getHistory",
    "branch from a past checkpoint",
    "threads.copy",
    "runs.wait",
    "multitask reject",
    "runs.cancel rollback, pending",
    "runs.cancel interrupt",
    "runs.cancel rollback, running",
    "runs.stream messages-tuple",
    "runs.joinStream without a thread",
    "runs.cancelMany",
    "threads.create with supersteps",
    "threads.search by metadata",
    "threads.patchState",
    "threads.joinStream",
)
STORE_CHECKS = ("store.putItem and getItem", "store.searchItems", "store.listNamespaces", "store.deleteItem")
"""client.store's calls, on a server whose store keeps memory (SQLite, PostgreSQL)."""
NO_STORE_CHECKS = ("store refused without a memory store",)
"""client.store's calls on a server over the file store, which keeps no memory."""

SKIPPED: tuple[str, ...] = ()
"""What the SDK calls that the server does not answer as the SDK expects yet (the script
says why); one that is fixed is checked in the script and moves to CHECKS."""


@pytest.fixture(scope="module")
def node() -> str:
    """The ``node`` binary, with the SDK installed beside the script; or skip (fail under
    ``PLAIT_REQUIRE_JS=1``)."""
    binary = shutil.which("node")
    missing = None
    if binary is None:
        missing = "node is not on PATH (Node 20 or later)"
    elif not (JS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        missing = f"{JS / 'node_modules'} is missing (run `npm ci` in {JS})"
    if missing is not None:
        if os.environ.get("PLAIT_REQUIRE_JS") == "1":
            pytest.fail(f"the JS SDK check is required (PLAIT_REQUIRE_JS=1) but {missing}")
        pytest.skip(f"JS SDK check skipped: {missing}")
    assert binary is not None
    return binary


def _pinned_version() -> str:
    version: str = json.loads((JS / "package.json").read_text())["dependencies"]["@langchain/langgraph-sdk"]
    return version


def run_sdk_check(node: str, url: str, api_key: str | None = None, *, memory: bool = True) -> dict[str, Any]:
    """Run ``sdk_check.mjs`` against ``url``, keeping its gates; its JSON summary.

    The script's stdout and stderr are read on threads of their own, so that a script that
    hangs fails the test at the deadline instead of blocking it."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}  # no key from the environment
    env["PLAIT_SDK_CHECK_NO_STORE"] = "0" if memory else "1"
    args = [node, "sdk_check.mjs", url, *([api_key] if api_key else [])]
    lines: queue.Queue[str | None] = queue.Queue()
    stderr: list[str | None] = []
    out: list[str] = []
    held: list[str] = []
    deadline = time.monotonic() + TIMEOUT
    with subprocess.Popen(
        args, cwd=JS, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        readers = [
            threading.Thread(target=_read_lines, args=(proc.stdout, lines.put), daemon=True),
            threading.Thread(target=_read_lines, args=(proc.stderr, stderr.append), daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            while (line := _next_line(lines, deadline, out)) is not None:
                command, _, gate = line.strip().partition(" ")
                if command == "HOLD":
                    GATES[gate] = threading.Event()
                    held.append(gate)
                elif command == "RELEASE":
                    GATES[gate].set()
                else:
                    out.append(line)
                    continue
                proc.stdin.write("ok\n")
                proc.stdin.flush()
            code = proc.wait(max(deadline - time.monotonic(), 1))
        finally:
            for gate in held:  # never leave a run of the server waiting
                GATES.pop(gate).set()
            if proc.poll() is None:
                proc.kill()
            for reader in readers:
                reader.join(10)
    assert code == 0, f"sdk_check.mjs failed (exit code {code}):\n{''.join(filter(None, stderr))}"
    summary: dict[str, Any] = json.loads(out[-1])
    return summary


def _read_lines(stream: IO[str], put: Callable[[Any], None]) -> None:
    for line in stream:
        put(line)
    put(None)


def _next_line(lines: queue.Queue[str | None], deadline: float, out: list[str]) -> str | None:
    """The script's next line of stdout (None: it closed stdout); fails at the deadline."""
    try:
        return lines.get(timeout=max(deadline - time.monotonic(), 0.01))
    except queue.Empty:
        pytest.fail(f"sdk_check.mjs took longer than {TIMEOUT:.0f} s; its stdout so far: {out}")


def _assert_all_checked(summary: dict[str, Any], url: str, *, memory: bool = True) -> None:
    assert summary["ok"] is True
    assert summary["sdk_version"] == _pinned_version()
    assert summary["url"] == url
    checks = summary["checks"]
    expected = CHECKS + (STORE_CHECKS if memory else NO_STORE_CHECKS)
    assert {name: checks[name] for name in expected if name in checks} == dict.fromkeys(expected, "ok")
    assert sorted(checks) == sorted(expected + SKIPPED)
    assert all(checks[name].startswith("skip: ") for name in SKIPPED)


def test_the_js_sdk_drives_a_served_sqlite_store(node: str, tmp_path: Path) -> None:
    with served(str(tmp_path / "s.db")) as url:
        summary = run_sdk_check(node, url)
    _assert_all_checked(summary, url)
    assert summary["events"] >= 4  # metadata, values and updates of gate and reply


def test_the_js_sdk_drives_a_served_file_store_with_an_api_key(node: str, tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path / 'files'}")
    try:
        with served(store, config=ServeConfig(api_key="sdk-check-key")) as url:
            summary = run_sdk_check(node, url, api_key="sdk-check-key", memory=False)
    finally:
        store.close()
    _assert_all_checked(summary, url, memory=False)
    assert summary["api_key"] is True


@pytest.mark.postgres
def test_the_js_sdk_drives_a_served_postgres_store_with_its_runs_on_the_run_queue(
    node: str, postgres_dsn: str, postgres_schema: str
) -> None:
    store = open_store(postgres_dsn, schema=postgres_schema)
    try:
        with served(store, config=ServeConfig(workers=1)) as url:
            summary = run_sdk_check(node, url)
    finally:
        store.close()
    _assert_all_checked(summary, url)
