"""``plait studio``: refuses an open bind without a token, finds the demo's store, serves."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ._cli_support import SCRIPT, Cli

pytest.importorskip("fastapi", reason="the Studio needs the studio extra: pip install 'plait[studio]'")


def test_a_non_loopback_bind_needs_a_token_and_a_port_must_be_one(cli: Cli) -> None:
    cli("run", "flow.py:graph", "--db", "s.db", "--input", '{"topic": "x"}')
    r = cli("studio", "--db", "s.db", "--host", "0.0.0.0")
    assert r.code == 2 and "--token" in r.one_line()
    r = cli("studio", "--db", "s.db", "--port", "70000")
    assert r.code == 2 and "--port" in r.one_line()
    r = cli("studio", "--db", "missing.db")
    assert r.code == 2 and "missing.db" in r.one_line()
    r = cli("studio", "--db", "s.db", "--trace-url", "http://localhost:16686/search")
    assert r.code == 2 and "--trace-url" in r.one_line() and "{trace_id}" in r.one_line()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_it_serves_the_demo_store_by_default_and_prints_its_url(cli: Cli) -> None:
    cli("run", "flow.py:graph", "--db", "plait-demo.db", "--thread", "t1", "--input", '{"topic": "x"}')
    port = _port()
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "plait"]
    with subprocess.Popen(
        [*command, "studio", "--port", str(port), "--graph", "flow.py:graph"],
        cwd=cli.folder,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        _serve_and_check(proc, port)


def _serve_and_check(proc: subprocess.Popen[str], port: int) -> None:
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "plait-demo.db" in first and f"http://127.0.0.1:{port}/" in first
        for _ in range(200):  # uvicorn binds after the URL is printed
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/threads", timeout=5) as reply:
                    body = reply.read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read() if proc.stderr else "exited") from None
                time.sleep(0.05)
        else:
            raise AssertionError("the Studio did not answer")
        assert [t["thread_id"] for t in json.loads(body)["threads"]] == ["t1"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/graphs", timeout=5) as reply:
            graphs = json.loads(reply.read())
        assert [g["name"] for g in graphs] == ["flow.py:graph"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
