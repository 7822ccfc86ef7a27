"""Crons through the LangGraph SDK, on SQLite (the server fires them) and on PostgreSQL (the
run queue's schedules): made, searched, changed and deleted; each tick makes one run.

Ticks are fired by calling the crons' ``tick(now)`` on the server's loop with a ``now`` of
the test's choosing, on a yearly schedule whose ticks real time never reaches while a test
runs; one test waits for a per-second cron in real time."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

from plait.serve.crons import Crons

from ._serve_support import APPS, served

YEARLY = "0 0 1 1 *"


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _tick(url: str, now: float) -> int:
    """Fire the ticks due at ``now`` as the server's ticker would; the number of runs made."""
    crons: Crons = APPS[url].state.crons
    assert crons.loop is not None
    return asyncio.run_coroutine_threadsafe(crons.tick(now), crons.loop).result(30)


def _fire(url: str, now: float) -> int:
    """:func:`_tick` until it fires: on PostgreSQL a worker's own periodic tick may hold the
    schedules' rows for a moment (``FOR UPDATE SKIP LOCKED``), and a tick that finds them held
    skips them, as a second worker would. A tick expected to fire nothing is asked once."""
    for _ in range(100):
        fired = _tick(url, now)
        if fired:
            return fired
        time.sleep(0.02)
    return 0


def _new_years(after: str) -> tuple[float, float]:
    """The next two ticks of :data:`YEARLY` after the ISO time ``after``."""
    year = datetime.datetime.fromisoformat(after).year + 1
    return tuple(datetime.datetime(y, 1, 1, tzinfo=datetime.UTC).timestamp() for y in (year, year + 1))  # type: ignore[return-value]


def _wait(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _done_runs(client: Any, thread_id: str, n: int) -> list[dict[str, Any]]:
    """The thread's runs once there are ``n`` and all ended."""

    def settled() -> bool:
        runs = client.runs.list(thread_id, limit=100)
        return len(runs) >= n and all(r["status"] not in ("pending", "running") for r in runs)

    _wait(settled, f"{n} finished runs on {thread_id}")
    runs: list[dict[str, Any]] = client.runs.list(thread_id, limit=100)
    return runs


def _on_postgres(request: pytest.FixtureRequest) -> bool:
    return bool(request.node.callspec.params["url"] == "postgres")


def test_a_thread_cron_is_made_searched_counted_and_deleted(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    cron = client.crons.create_for_thread(
        thread, "chat", schedule="*/5 * * * *", input=_say("tick"), metadata={"team": "a"}, stream_mode=["updates"]
    )
    assert cron["thread_id"] == thread and cron["schedule"] == "*/5 * * * *" and cron["enabled"] is True
    assert cron["payload"]["input"] == _say("tick") and cron["metadata"] == {"team": "a"}
    assert cron["assistant_id"] == client.assistants.search(graph_id="chat")[0]["assistant_id"]
    assert cron["next_run_date"] is not None and cron["end_time"] is None and cron["user_id"] is None
    assert datetime.datetime.fromisoformat(cron["next_run_date"]).minute % 5 == 0
    assert client.crons.search(thread_id=thread) == [cron]
    assert client.crons.search(assistant_id="chat", metadata={"team": "a"}) == [cron]
    assert client.crons.search(metadata={"team": "b"}) == []
    assert client.crons.search(select=["cron_id", "schedule"]) == [
        {"cron_id": cron["cron_id"], "schedule": "*/5 * * * *"}
    ]
    assert client.crons.count(thread_id=thread) == 1
    client.crons.delete(cron["cron_id"])
    assert client.crons.search() == [] and client.crons.count() == 0
    with pytest.raises(NotFoundError):
        client.crons.delete(cron["cron_id"])


def test_a_stateless_cron_is_made_and_listed(client: Any) -> None:
    cron = client.crons.create("chat", schedule="0 * * * *", input=_say("hourly"), on_run_completed="keep")
    assert cron["thread_id"] is None and cron["on_run_completed"] == "keep"
    other = client.crons.create("steps", schedule="30 * * * *")
    assert other["on_run_completed"] == "delete"
    assert {c["cron_id"] for c in client.crons.search()} == {cron["cron_id"], other["cron_id"]}
    assert [c["cron_id"] for c in client.crons.search(assistant_id="steps")] == [other["cron_id"]]
    assert [c["cron_id"] for c in client.crons.search(sort_by="created_at", sort_order="asc", limit=1)] == [
        cron["cron_id"]
    ]


def test_bad_crons_are_refused_in_the_sdk_error_shape_and_nothing_is_stored(url: str, client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    with pytest.raises(UnprocessableEntityError, match="not a cron expression"):
        client.crons.create_for_thread(thread, "chat", schedule="every minute", input=_say("x"))
    with pytest.raises(UnprocessableEntityError, match="stream_mode"):
        client.crons.create("chat", schedule="* * * * *", stream_mode="sideways")
    with pytest.raises(UnprocessableEntityError, match="timezone"):
        client.crons.create("chat", schedule="* * * * *", timezone="America/New_York")
    with pytest.raises(NotFoundError, match="no assistant 'nobody'"):
        client.crons.create("nobody", schedule="* * * * *")
    with pytest.raises(NotFoundError, match="thread 'missing' was not found"):
        client.crons.create_for_thread("missing", "chat", schedule="* * * * *")
    r = httpx.post(f"{url}/runs/crons", json={"assistant_id": "chat", "schedule": "61 * * * *"})
    assert r.status_code == 422 and r.json()["error"] == "ServeRequestError" and "schedule" in r.json()["message"]
    assert client.crons.search() == [] and client.crons.count() == 0


def test_each_tick_of_a_thread_cron_makes_one_run_on_its_thread(url: str, client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    cron = client.crons.create_for_thread(
        thread, "chat", schedule=YEARLY, input=_say("happy new year"), stream_mode=["updates"]
    )
    first, second = _new_years(cron["created_at"])
    assert cron["next_run_date"] == datetime.datetime.fromtimestamp(first, datetime.UTC).isoformat()
    assert _tick(url, first - 1) == 0
    assert _fire(url, first) == 1
    assert _tick(url, first) == 0 and _tick(url, first + 30) == 0  # the same tick again: no run
    _done_runs(client, thread, 1)
    assert _fire(url, second) == 1
    runs = _done_runs(client, thread, 2)
    assert len(runs) == 2 and all(r["status"] == "success" for r in runs)
    assert all(r["metadata"]["cron_id"] == cron["cron_id"] for r in runs)
    state = client.threads.get_state(thread)
    assert state["values"]["turns"] == 2
    events = httpx.get(f"{url}/threads/{thread}/runs/{runs[0]['run_id']}/stream", timeout=30).text
    assert "event: updates" in events and "event: values" not in events  # the stream modes the cron asked for
    assert [m["content"] for m in state["values"]["messages"]][:2] == ["happy new year", "echo: happy new year"]
    assert client.crons.search()[0]["next_run_date"] > cron["next_run_date"]


def test_each_tick_of_a_stateless_cron_makes_one_run(url: str, client: Any) -> None:
    cron = client.crons.create("steps", schedule=YEARLY, on_run_completed="keep", metadata={"kind": "nightly"})
    first, second = _new_years(cron["created_at"])
    assert [_fire(url, first), _tick(url, first), _fire(url, second)] == [1, 0, 1]
    assert _tick(url, second + 60) == 0


def test_a_cron_is_changed_and_paused(url: str, client: Any, request: pytest.FixtureRequest) -> None:
    thread = client.threads.create()["thread_id"]
    cron = client.crons.create_for_thread(thread, "chat", schedule=YEARLY, input=_say("a"))
    changed = client.crons.update(cron["cron_id"], schedule="0 0 1 7 *", input=_say("b"), metadata={"v": 2})
    assert changed["schedule"] == "0 0 1 7 *" and changed["payload"]["input"] == _say("b")
    assert changed["metadata"] == {"v": 2} and changed["next_run_date"] != cron["next_run_date"]
    assert client.crons.search() == [changed]
    with pytest.raises(UnprocessableEntityError, match="not a cron expression"):
        client.crons.update(cron["cron_id"], schedule="never")
    with pytest.raises(NotFoundError):
        client.crons.update("f" * 32, schedule=YEARLY)
    if _on_postgres(request):  # the run queue's schedules cannot be paused: refused, unchanged
        with pytest.raises(UnprocessableEntityError, match="paused"):
            client.crons.update(cron["cron_id"], enabled=False)
        assert client.crons.search() == [changed]
        return
    paused = client.crons.update(cron["cron_id"], enabled=False)
    assert paused["enabled"] is False and paused["next_run_date"] is None
    assert client.crons.search(enabled=True) == [] and client.crons.search(enabled=False) == [paused]
    assert _tick(url, datetime.datetime(2100, 7, 2, tzinfo=datetime.UTC).timestamp()) == 0


def test_a_cron_of_one_second_fires_each_tick_once_in_real_time(client: Any, request: pytest.FixtureRequest) -> None:
    thread = client.threads.create()["thread_id"]
    started = time.time()
    cron = client.crons.create_for_thread(thread, "chat", schedule="* * * * * *", input=_say("beat"))
    _wait(lambda: len(client.runs.list(thread, limit=100)) >= 3, "three runs of a per-second cron")
    client.crons.delete(cron["cron_id"])
    ended = time.time()
    made = len(client.runs.list(thread, limit=100))
    runs = _done_runs(client, thread, made)
    assert len(runs) <= int(ended - started) + 1  # never more than one run a second
    assert client.threads.get_state(thread)["values"]["turns"] == len(runs)
    if not _on_postgres(request):  # the server's own crons mark each run with its tick
        ticks = sorted(r["metadata"]["cron_tick"] for r in runs)
        assert ticks == list(range(ticks[0], ticks[0] + len(ticks)))
    time.sleep(1.5)
    assert len(client.runs.list(thread, limit=100)) == len(runs)  # deleted: no more runs


def test_a_tick_fired_before_a_restart_is_not_fired_again(tmp_path: Path) -> None:
    db = str(tmp_path / "serve.db")
    with served(db) as url, get_sync_client(url=url, api_key=None) as client:
        thread = client.threads.create()["thread_id"]
        cron: Any = client.crons.create_for_thread(thread, "chat", schedule=YEARLY, input=_say("once"))
        first, _ = _new_years(cron["created_at"])
        assert _fire(url, first) == 1
        _done_runs(client, thread, 1)
    with (
        contextlib.closing(sqlite3.connect(db)) as conn,
        conn,
    ):  # as if the server stopped after storing the run, before its tick
        conn.execute("UPDATE plait_serve_crons SET last_tick = ?", (first - 1,))
    with served(db) as url, get_sync_client(url=url, api_key=None) as client:
        assert _tick(url, first) == 0
        assert len(client.runs.list(thread)) == 1
        assert client.crons.search()[0]["cron_id"] == cron["cron_id"]
