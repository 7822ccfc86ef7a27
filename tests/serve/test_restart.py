"""A ``plait serve`` killed (SIGKILL) in the middle of a streamed run, and started again on the
same SQLite file: the run goes on, a client that rejoins with its ``Last-Event-ID`` gets every
later event once (ids keep increasing, none twice), and the run's work is done once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from langgraph_sdk import get_sync_client

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(db: Path, port: int, gates: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.serve._serve_main", str(db), str(port), str(gates)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ok", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        assert proc.poll() is None, "plait serve exited while starting"
        assert time.monotonic() < deadline, "plait serve did not start"
        time.sleep(0.05)


def _read_until(url: str, wanted: object) -> list[tuple[str, str, object]]:
    """The stream's ``(id, event, data)`` from its start until an event carries ``wanted``."""
    got: list[tuple[str, str, object]] = []
    event_id, name = "", ""
    with httpx.stream("GET", url, headers={"Last-Event-ID": "-1"}, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                got.append((event_id, name, orjson.loads(line[6:])))
                if got[-1][2] == wanted:
                    return got
    raise AssertionError(f"the stream ended before {wanted!r}")


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def test_a_killed_server_resumes_its_run_and_a_rejoining_client_misses_nothing_and_gets_nothing_twice(
    tmp_path: Path,
) -> None:
    db, gates, port = tmp_path / "serve.db", tmp_path / "gates", _port()
    gates.mkdir()
    proc = _start(db, port, gates)
    url = f"http://127.0.0.1:{port}"
    try:
        with get_sync_client(url=url, api_key=None) as client:
            thread = client.threads.create()["thread_id"]
            run = client.runs.create(thread, "slow", input={"n": 0}, stream_mode=["values", "custom"])
            _wait_for(gates / "waiting")  # the run is inside step 6, its first five steps committed
            seen = _read_until(f"{url}/threads/{thread}/runs/{run['run_id']}/stream", {"at": 5})
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    except BaseException:
        proc.kill()
        raise
    assert seen[0][1] == "metadata"
    last = seen[-1][0]
    (gates / "waiting").unlink()
    (gates / "go").touch()
    proc = _start(db, port, gates)
    try:
        with get_sync_client(url=url, api_key=None) as client:
            rest = list(client.runs.join_stream(thread, run["run_id"], last_event_id=last))
            final = client.runs.get(thread, run["run_id"])
            state = client.threads.get_state(thread)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    ids = [int(i) for i, _, _ in seen] + [int(p.id or 0) for p in rest]
    assert ids == sorted(set(ids)), "an event id came twice or out of order"
    assert int(rest[0].id or 0) == int(last) + 1
    assert [p.data for p in rest if p.event == "metadata"] == [{"run_id": run["run_id"], "attempt": 2}]
    assert [p.data for p in rest if p.event == "values"][-1] == {"n": 10}
    assert final["status"] == "success" and state["values"] == {"n": 10}  # each step's +1 counted once
