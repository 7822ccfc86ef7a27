"""The timeline's per-step detail: how long each node took, which was retried, and who ran
the step (a run's ``timings`` and ``owner`` metadata), on the page and in the JSON API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from plait import SqliteCheckpointer
from plait.server.timings import duration_text, step_timing

from ._studio_support import ORIGIN, make_client
from ._timeline_support import retried_graph, write_step


@pytest.fixture
def timed(tmp_path: Path) -> Iterator[TestClient]:
    saver = SqliteCheckpointer(str(tmp_path / "timed.db"))
    saver.setup()
    write_step(saver, "timed", {"topic": "rivers"}, source="input")
    write_step(
        saver,
        "timed",
        {"notes": ["a"], "sources": {"web": 1}},
        metadata={
            "writes": {"research": ["notes"], "fetch": ["sources"]},
            "timings": [["research", 0.012, 1], ["fetch", 1.34, 2]],
            "owner": "worker-a/job-7",
        },
    )
    write_step(saver, "timed", {"style": "brief"}, source="update", metadata={"writes": {"": ["style"]}})
    with make_client(saver) as c:
        yield c
    saver.close()


def _rows(page: str) -> list[str]:
    return re.findall(r"<li data-id=.*?</li>", page, flags=re.S)


def test_a_step_shows_its_nodes_durations_retries_and_owner(timed: TestClient) -> None:
    update, loop, root = _rows(timed.get("/threads/timed").text)
    assert "<b>research</b> 12 ms" in loop and "<b>fetch</b> 1.3 s" in loop
    assert loop.count('class="attempt"') == 1 and "attempt 2" in loop and "data-retried" in loop
    assert "by worker-a/job-7" in loop
    for quiet in (update, root):  # no timings recorded: nothing extra
        assert 'class="timing"' not in quiet and "attempt" not in quiet


def test_the_api_gives_a_checkpoints_timings_and_owner(timed: TestClient) -> None:
    history = timed.get("/api/threads/timed/history").json()["checkpoints"]
    loop = next(cp for cp in history if cp["source"] == "loop")
    assert loop["metadata"]["timings"] == [["research", 0.012, 1], ["fetch", 1.34, 2]]
    assert loop["metadata"]["owner"] == "worker-a/job-7"
    state = timed.get("/api/threads/timed/state", params={"checkpoint_id": loop["checkpoint_id"]}).json()
    assert state["metadata"]["timings"][1] == ["fetch", 1.34, 2]
    assert all("timings" not in cp["metadata"] for cp in history if cp["source"] != "loop")


def test_durations_read_at_a_glance() -> None:
    assert [duration_text(s) for s in (0.000024, 0.0006, 0.012, 0.9994, 1.34, 59.96, 125, 7300)] == [
        "24 µs",
        "1 ms",
        "12 ms",
        "999 ms",
        "1.3 s",
        "1 min 0 s",
        "2 min 5 s",
        "2 h 1 min",
    ]


def test_metadata_of_another_shape_shows_nothing() -> None:
    assert step_timing({}) is None
    assert step_timing({"timings": "soon", "owner": 7}) is None
    odd = step_timing({"timings": [["a"], [1, 2, 3], ["b", True, 1], ["c", 0.5, "x"], ["d", 2]]})
    assert odd is not None and [(n.node, n.seconds, n.attempts) for n in odd.nodes] == [("c", 0.5, 1), ("d", 2.0, 1)]
    assert step_timing({"owner": "w/job-1"}) == type(odd)((), "w/job-1")


def test_a_huge_write_makes_a_small_change_panel_and_loads_whole(client: TestClient) -> None:
    token = client.get("/api/csrf").json()["csrf_token"]
    huge, items = "y" * 2_000_000, [{"n": i, "text": f"item {i}"} for i in range(3000)]
    r = client.post(
        "/api/threads/done/state",
        json={"values": {"answer": huge, "notes": items}},
        headers={"Origin": ORIGIN, "X-CSRF-Token": token},
    )
    assert r.status_code == 201
    page = client.get("/threads/done").text
    assert len(page) < 60_000  # the whole write is 2.1 MB
    assert "a string of 2,000,000 characters" in page and "3,000 appended" in page and "… and 2,995 more" in page
    loads = {
        m.group(2): m.group(1).replace("&amp;", "&")
        for m in re.finditer(r'data-lazy="([^"]*/changes\?[^"]*key=(\w+))"', page)
    }
    assert sorted(loads) == ["answer", "notes"]
    answer = client.get(loads["answer"]).json()
    assert answer["key"] == "answer" and answer["value"]["after"] == huge and answer["value"]["kind"] == "changed"
    assert client.get(loads["notes"]).json()["value"]["appended"] == items
    missing = client.get(loads["notes"].replace("key=notes", "key=style"))
    assert missing.status_code == 404 and "style" in missing.json()["message"]

    # The diff page of the same two checkpoints: as small, and loads the same values.
    picks = re.findall(r'name="pick" value="([^"]+)"', page)[:2]
    diff = client.get("/diff", params=[("pick", p) for p in picks]).text
    assert len(diff) < 30_000 and "3,000 appended" in diff
    lazy = dict(re.findall(r'data-lazy="([^"]*/api/diff\?[^"]*key=(\w+))"', diff))
    assert sorted(lazy.values()) == ["answer", "notes"]
    by_key = {k: url.replace("&amp;", "&") for url, k in lazy.items()}
    assert client.get(by_key["notes"]).json()["value"]["appended"] == items


def test_a_small_change_is_still_inline(client: TestClient) -> None:
    page = client.get("/threads/done").text
    assert 'class="change changed"' in page or 'class="change ' in page
    assert "/changes?" not in page


def test_a_real_run_with_a_retried_node_shows_its_durations_attempt_and_owner(tmp_path: Path) -> None:
    saver = SqliteCheckpointer(str(tmp_path / "real.db"))
    app = retried_graph().bind(checkpointer=saver)
    app.invoke({"topic": "rivers"}, thread_id="real", owner="worker-a/job-7")
    with make_client(saver) as c:
        rows = _rows(c.get("/threads/real").text)
        took = r"<b>{}</b> \d+(\.\d)? (µs|ms|s)"
        (both,) = [row for row in rows if 'data-node="fetch"' in row]
        assert re.search(took.format("fetch"), both) and re.search(took.format("search"), both), both
        assert both.count("attempt 2") == 1 and "by worker-a/job-7" in both
        fetch = re.search(r'<span class="took" data-node="fetch".*?</span></span>', both, flags=re.S)
        assert fetch and "attempt 2" in fetch.group(0)
        (write,) = [row for row in rows if 'data-node="write"' in row]
        assert re.search(took.format("write"), write) and "attempt" not in write
        assert sum('class="timing"' in row for row in rows) == 3  # plan, fetch + search, write: not the input
        history = c.get("/api/threads/real/history").json()["checkpoints"]
        step = next(cp for cp in history if "fetch" in cp["writes"])
        assert {node: attempts for node, _, attempts in step["metadata"]["timings"]} == {"fetch": 2, "search": 1}
        assert step["metadata"]["owner"] == "worker-a/job-7"
    saver.close()
