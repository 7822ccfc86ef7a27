"""``plait serve`` on PostgreSQL with its runs on ``plait worker`` processes: a worker SIGKILLed
in the middle of a streamed answer; another worker resumes the run, and a client that rejoins
with its ``Last-Event-ID`` sees no event id twice, ids still increasing, and the final state
holds the answer once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest
from langgraph_sdk import get_sync_client

from plait.serve.app import ServeConfig

from ._serve_support import served
from ._stream_flows import WORDS, graph

ROOT = Path(__file__).resolve().parents[2]
TARGET = "talk=tests.serve._stream_flows:graph"

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _worker(dsn: str, schema: str, gates: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "plait", "worker", "--db", dsn, "--schema", schema, "--graph", TARGET]
    command += ["--heartbeat", "0.5", "--stalled-after", "2", "--sweep-every", "1", "--lease-ttl", "3", "--poll", "0.5"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PLAIT_TEST_GATES": str(gates)}
    with log.open("ab") as out:
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)


def _wait(predicate: object, what: str, timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _frames(url: str, until: int) -> list[tuple[int, str, object]]:
    """The stream's ``(id, event, data)`` from its start until ``until`` message chunks came."""
    got: list[tuple[int, str, object]] = []
    event_id, name = 0, ""
    with httpx.stream("GET", url, headers={"Last-Event-ID": "-1"}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                got.append((event_id, name, orjson.loads(line[6:])))
                if sum(1 for _, n, _ in got if n == "messages") == until:
                    return got
    raise AssertionError(f"the stream ended before {until} chunks")


@pytest.fixture
def workers(postgres_dsn: str, postgres_schema: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    gates = tmp_path / "gates"
    gates.mkdir()
    procs = [_worker(postgres_dsn, postgres_schema, gates, tmp_path / f"worker-{i}.log") for i in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(30)


def test_a_worker_killed_mid_answer_another_resumes_and_the_rejoining_client_misses_nothing(
    postgres_dsn: str, postgres_schema: str, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    from plait.checkpoint import open as open_store

    gates = tmp_path / "gates"
    store = open_store(postgres_dsn, schema=postgres_schema)
    try:
        with served(store, {"talk": graph}, config=ServeConfig(workers=0)) as url:
            with get_sync_client(url=url, api_key=None) as sdk:
                client: Any = sdk  # the SDK's annotations are looser than its answers
                thread = client.threads.create()["thread_id"]
                run = client.runs.create(thread, "talk", input={"messages": [{"role": "user", "content": "go"}]},
                                         stream_mode=["messages-tuple", "values"])  # fmt: skip
                _wait(lambda: (gates / "waiting").exists(), "the answer's fifth token")
                seen = _frames(f"{url}/threads/{thread}/runs/{run['run_id']}/stream", until=5)
                with psycopg.connect(postgres_dsn, options=f"-c search_path={postgres_schema}") as conn:
                    (owner,) = conn.execute(
                        "SELECT worker FROM plait_run WHERE run_id = %s", (run["run_id"],)
                    ).fetchone()  # type: ignore[misc]
                pid = int(owner.split("/")[0].rsplit(":", 1)[1])
                victim = next(p for p in workers if p.pid == pid)
                victim.send_signal(signal.SIGKILL)
                victim.wait(30)
                (gates / "waiting").unlink()
                (gates / "go").touch()
                rest = list(client.runs.join_stream(thread, run["run_id"], last_event_id=str(seen[-1][0])))
                final = client.runs.get(thread, run["run_id"])
                state = client.threads.get_state(thread)
    finally:
        store.close()
    ids = [i for i, _, _ in seen] + [int(p.id or 0) for p in rest]
    assert ids == sorted(set(ids)), "an event id came twice or out of order"
    assert [p.data for p in rest if p.event == "metadata"][0]["attempt"] == 2
    again = [p.data[0]["content"] for p in rest if p.event == "messages"]
    assert again == WORDS  # the resumed attempt streams the whole answer again, under new ids
    assert final["status"] == "success"
    answers = [m for m in state["values"]["messages"] if m.get("type") == "ai"]
    assert [m["content"] for m in answers] == ["".join(WORDS)]  # stored once
