"""The JSON API: every route, and every error a 4xx with plait's message."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from typing import Any

from fastapi.testclient import TestClient

from plait.server import StudioConfig, create_app
from plait.server.studio_runs import StudioRun

from ._studio_support import write_headers


def test_threads_list_filters_searches_and_pages(client: TestClient) -> None:
    body = client.get("/api/threads").json()
    assert {t["thread_id"]: t["status"] for t in body["threads"]} == {"waiting": "interrupted", "done": "idle"}
    assert body["next_cursor"] is None
    first = client.get("/api/threads", params={"limit": 1}).json()
    assert len(first["threads"]) == 1 and first["next_cursor"]
    rest = client.get("/api/threads", params={"limit": 1, "cursor": first["next_cursor"]}).json()
    assert {first["threads"][0]["thread_id"], rest["threads"][0]["thread_id"]} == {"waiting", "done"}
    assert [t["thread_id"] for t in client.get("/api/threads", params={"status": "idle"}).json()["threads"]] == ["done"]
    assert [t["thread_id"] for t in client.get("/api/threads", params={"q": "wai"}).json()["threads"]] == ["waiting"]
    meta = client.get("/api/threads", params={"metadata": '{"source": "loop"}', "status": "idle"}).json()
    assert [t["thread_id"] for t in meta["threads"]] == ["done"]


def test_bad_listing_parameters_are_4xx_with_a_message(client: TestClient) -> None:
    r = client.get("/api/threads", params={"status": "sleeping"})
    assert r.status_code == 422 and "status" in r.json()["message"]
    r = client.get("/api/threads", params={"cursor": "not-a-cursor"})
    assert r.status_code == 400 and "cursor" in r.json()["message"]
    r = client.get("/api/threads", params={"metadata": "{nope"})
    assert r.status_code == 400 and "not JSON" in r.json()["message"]
    assert client.get("/api/threads", params={"limit": 0}).status_code == 422


def test_a_thread_summary_and_unknown_threads(client: TestClient) -> None:
    s = client.get("/api/threads/waiting").json()
    assert s["status"] == "interrupted" and s["next"] == ["ask"]
    assert s["interrupts"][0]["value"]["ask"] == "publish?" and s["runs"] == []
    r = client.get("/api/threads/nope")
    assert r.status_code == 404 and r.json()["error"] == "CheckpointNotFoundError" and "nope" in r.json()["message"]
    r = client.get("/api/threads/" + "x" * 5000)
    assert r.status_code == 400 and r.json()["error"] == "InvalidIdError"


def test_history_is_metadata_only_unless_asked_and_pages(client: TestClient) -> None:
    h = client.get("/api/threads/done/history").json()
    steps = [cp["step"] for cp in h["checkpoints"]]
    assert steps == sorted(steps, reverse=True) and h["next_before"] is None
    assert all("values" not in cp for cp in h["checkpoints"])
    assert all("values" in cp for cp in client.get("/api/threads/done/history?values=true").json()["checkpoints"])
    page = client.get("/api/threads/done/history", params={"limit": 1}).json()
    assert len(page["checkpoints"]) == 1 and page["next_before"] == page["checkpoints"][0]["checkpoint_id"]
    rest = client.get("/api/threads/done/history", params={"before": page["next_before"]}).json()
    assert [cp["checkpoint_id"] for cp in rest["checkpoints"]] == [cp["checkpoint_id"] for cp in h["checkpoints"][1:]]
    assert client.get("/api/threads/nope/history").status_code == 404


def test_state_at_a_checkpoint_one_channel_and_what_it_changed(client: TestClient) -> None:
    h = client.get("/api/threads/done/history").json()["checkpoints"]
    root = h[-1]["checkpoint_id"]
    st = client.get("/api/threads/done/state", params={"checkpoint_id": root}).json()
    assert st["values"]["topic"] == "lakes" and "answer" not in st["values"]
    assert client.get("/api/threads/done/state").json()["values"]["answer"] == "yes"
    one = client.get("/api/threads/done/state", params={"key": "notes"}).json()
    assert one == {"key": "notes", "value": ["long note on lakes"]}
    assert client.get("/api/threads/done/state", params={"key": "nokey"}).status_code == 404
    assert client.get("/api/threads/done/state", params={"checkpoint_id": "0" * 22}).status_code == 404
    research = next(cp for cp in h if "research" in cp["writes"])
    ch = client.get("/api/threads/done/changes", params={"checkpoint_id": research["checkpoint_id"]}).json()
    notes = next(c for c in ch["channels"] if c["key"] == "notes")
    assert notes == {"key": "notes", "kind": "list", "appended": ["long note on lakes"], "removed": []}
    assert client.get("/api/threads/done/changes", params={"checkpoint_id": root}).json()["a"] is None


def test_diff_of_two_threads_and_of_two_checkpoints(client: TestClient) -> None:
    d = client.get("/api/diff", params={"a": "waiting", "b": "done"}).json()
    topic = next(c for c in d["channels"] if c["key"] == "topic")
    assert topic == {"key": "topic", "kind": "changed", "before": "rivers", "after": "lakes"}
    h = client.get("/api/threads/done/history").json()["checkpoints"]
    d = client.get("/api/diff", params={"a": f"done@{h[-1]['checkpoint_id']}", "b": f"done@{h[0]['checkpoint_id']}"})
    assert set(d.json()["keys"]) >= {"notes", "answer", "messages"}
    assert client.get("/api/diff", params={"a": "done", "b": "nope"}).status_code == 404
    r = client.get("/api/diff", params={"a": "done@", "b": "done"})
    assert r.status_code == 400 and "checkpoint id" in r.json()["message"]
    assert client.get("/api/diff", params={"a": "done"}).status_code == 422


def test_graphs_and_their_svg_with_the_next_node_marked(client: TestClient, bare: TestClient) -> None:
    graphs = client.get("/api/graphs").json()
    assert [g["name"] for g in graphs] == ["small"] and "ask" in graphs[0]["nodes"]
    svg = client.get("/api/graphs/small/svg", params={"thread_id": "waiting"})
    assert svg.headers["content-type"].startswith("image/svg+xml")
    assert 'data-name="ask" data-state="next"' in svg.text and 'data-state="running"' not in svg.text
    assert "data-state" not in client.get("/api/graphs/small/svg").text
    r = client.get("/api/graphs/other/svg")
    assert r.status_code == 400 and r.json()["error"] == "GraphRequiredError"
    assert bare.get("/api/graphs").json() == []


def test_update_state_folds_through_reducers_and_as_a_node(client: TestClient) -> None:
    h = write_headers(client)
    r = client.post("/api/threads/done/state", json={"values": {"notes": ["by hand"]}}, headers=h)
    assert r.status_code == 201 and r.json()["writes"] == {"update": ["notes"]}
    assert client.get("/api/threads/done/state").json()["values"]["notes"] == ["long note on lakes", "by hand"]
    r = client.post("/api/threads/done/state", json={"values": {"nokey": 1}}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "UnknownChannelError" and "nokey" in r.json()["message"]
    r = client.post("/api/threads/done/state", json={"values": {"sources": [1, 2]}}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "InvalidUpdateError" and "sources" in r.json()["message"]
    r = client.post("/api/threads/done/state", json={"values": {"topic": "x"}, "as_node": "nonode"}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "MissingNodeError"
    r = client.post("/api/threads/done/state", json={"values": {"topic": "x"}, "as_node": "research"}, headers=h)
    assert r.status_code == 201 and client.get("/api/threads/done").json()["next"] == ["ask"]
    assert client.post("/api/threads/nope/state", json={"values": {"topic": "x"}}, headers=h).status_code == 404
    r = client.post("/api/threads/done/state", content=b"{not json", headers={**h, "content-type": "application/json"})
    assert r.status_code == 422


def test_fork_copies_or_folds_edits_into_a_new_thread_only(client: TestClient, bare: TestClient) -> None:
    h = write_headers(client)
    root = client.get("/api/threads/done/history").json()["checkpoints"][-1]["checkpoint_id"]
    r = client.post(
        "/api/threads/done/fork",
        json={"thread_id": "f1", "checkpoint_id": root, "edits": {"style": "short"}},
        headers=h,
    )
    assert r.status_code == 201
    st = client.get("/api/threads/f1/state").json()
    assert st["values"]["style"] == "short" and st["metadata"]["forked_from"]["checkpoint_id"] == root
    r = client.post("/api/threads/done/fork", json={"thread_id": "f1"}, headers=h)
    assert r.status_code == 409 and r.json()["error"] == "ThreadExistsError"
    r = client.post("/api/threads/done/fork", json={"thread_id": "f2", "edits": {"nokey": 1}}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "UnknownChannelError"
    assert client.get("/api/threads/f2").status_code == 404
    hb = write_headers(bare)
    assert bare.post("/api/threads/done/fork", json={"thread_id": "copy"}, headers=hb).status_code == 201
    r = bare.post("/api/threads/done/fork", json={"thread_id": "f3", "edits": {"style": "x"}}, headers=hb)
    assert r.status_code == 400 and r.json()["error"] == "GraphRequiredError" and "--graph" in r.json()["message"]


def _wait_run(client: TestClient, thread: str, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        runs: dict[str, dict[str, Any]] = {r["run_id"]: r for r in client.get(f"/api/threads/{thread}/runs").json()}
        if runs[run_id]["status"] != "running":
            return runs[run_id]
        time.sleep(0.02)
    raise AssertionError("the run did not finish")


def test_answering_an_interrupt_runs_the_thread_to_the_end_in_the_studio(client: TestClient) -> None:
    h = write_headers(client)
    r = client.post("/api/threads/waiting/runs", json={"action": "resume", "resume": "ship it"}, headers=h)
    assert r.status_code == 202 and r.json()["status"] == "running"
    assert _wait_run(client, "waiting", r.json()["run_id"])["status"] == "done"
    s = client.get("/api/threads/waiting").json()
    assert s["status"] == "idle" and s["next"] == []
    assert client.get("/api/threads/waiting/state").json()["values"]["answer"] == "ship it"
    r = client.post("/api/threads/waiting/runs", json={"action": "resume", "resume": 1}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "InvalidResumeError"


def test_continue_and_replay_from_a_past_checkpoint(client: TestClient) -> None:
    h = write_headers(client)
    hist = client.get("/api/threads/done/history").json()["checkpoints"]
    root = hist[-1]["checkpoint_id"]
    r = client.post("/api/threads/done/runs", json={"action": "replay", "checkpoint_id": root}, headers=h)
    assert r.status_code == 202
    assert _wait_run(client, "done", r.json()["run_id"])["status"] == "interrupted"
    s = client.get("/api/threads/done").json()
    assert s["status"] == "interrupted" and s["head"]["parent_id"] != hist[0]["checkpoint_id"]
    client.post("/api/threads/done/state", json={"values": {"topic": "x"}, "as_node": "research"}, headers=h)
    r = client.post("/api/threads/done/runs", json={"action": "continue"}, headers=h)
    assert _wait_run(client, "done", r.json()["run_id"])["status"] == "interrupted"
    r = client.post("/api/threads/done/runs", json={"action": "fly"}, headers=h)
    assert r.status_code == 422


def test_runs_and_edits_need_a_graph(bare: TestClient) -> None:
    h = write_headers(bare)
    for path, body in (
        ("/api/threads/waiting/runs", {"action": "resume", "resume": 1}),
        ("/api/threads/waiting/state", {"values": {"topic": "x"}}),
    ):
        r = bare.post(path, json=body, headers=h)
        assert r.status_code == 400 and r.json()["error"] == "GraphRequiredError" and "--graph" in r.json()["message"]


def test_a_run_started_here_can_be_cancelled(client: TestClient) -> None:
    h = write_headers(client)
    r = client.delete("/api/threads/waiting/runs/nosuchrun", headers=h)
    assert r.status_code == 404 and "nosuchrun" in r.json()["message"]
    r = client.post("/api/threads/waiting/runs", json={"action": "resume", "resume": "y"}, headers=h)
    run_id = r.json()["run_id"]
    r = client.delete(f"/api/threads/waiting/runs/{run_id}", headers=h)
    assert r.status_code == 200 and r.json()["status"] in ("cancelled", "done")
    assert client.get("/api/threads/waiting/runs").json()[0]["status"] != "running"


def test_delete_a_thread(client: TestClient) -> None:
    h = write_headers(client)
    r = client.delete("/api/threads/done", headers=h)
    assert r.status_code == 200 and r.json()["deleted"] is True and r.json()["checkpoints"] >= 3
    assert client.get("/api/threads/done").status_code == 404
    assert client.delete("/api/threads/done", headers=h).status_code == 404


def test_the_openapi_document_names_the_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for p in (
        "/api/threads",
        "/api/threads/{thread_id}",
        "/api/threads/{thread_id}/history",
        "/api/threads/{thread_id}/state",
        "/api/threads/{thread_id}/fork",
        "/api/threads/{thread_id}/runs",
        "/api/threads/{thread_id}/events",
        "/api/diff",
        "/api/graphs",
        "/api/graphs/{name}/svg",
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/cancel",
        "/api/events/runs",
    ):
        assert p in paths, p


def _gate_graph() -> Any:
    from plait import END, START, Graph, StateSchema

    async def hold(state: Any) -> dict[str, Any]:
        await asyncio.Event().wait()  # never set: runs until cancelled
        return {}

    g = Graph(StateSchema.builder().add_lww("x").build())
    g.add_node("prep", lambda s: {"x": 1}).add_node("hold", hold)
    g.add_edge(START, "prep").add_edge("prep", "hold").add_edge("hold", END)
    return g


def test_the_running_node_is_marked_and_a_cancelled_run_leaves_the_thread(tmp_path: Any) -> None:
    from plait import SqliteCheckpointer

    saver = SqliteCheckpointer(tmp_path / "gate.db")
    _gate_graph().compile(checkpointer=saver, interrupt_before=["hold"]).invoke({}, thread_id="g")
    app = create_app(saver, [_gate_graph().compile(name="gate")], config=StudioConfig(allowed_hosts=("testserver",)))
    with TestClient(app) as client:
        h = write_headers(client)
        r = client.post("/api/threads/g/runs", json={"action": "continue"}, headers=h)
        assert r.status_code == 202
        run_id = r.json()["run_id"]
        deadline = time.monotonic() + 20
        while 'data-name="hold" data-state="running"' not in client.get("/api/graphs/gate/svg?thread_id=g").text:
            assert time.monotonic() < deadline, "the running node was never marked"
            time.sleep(0.02)
        assert client.get("/api/threads/g").json()["status"] == "busy"
        again = client.post("/api/threads/g/runs", json={"action": "continue"}, headers=h)
        assert again.status_code == 409 and again.json()["error"] == "ThreadBusyError"
        r = client.delete(f"/api/threads/g/runs/{run_id}", headers=h)
        assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.json()["running"] == []
        assert client.get("/api/threads/g").json()["status"] != "busy"
        assert 'data-state="running"' not in client.get("/api/graphs/gate/svg?thread_id=g").text
    saver.close()


def test_the_studio_reads_and_writes_every_backend(make_saver: Any) -> None:
    from plait import Command

    from ._studio_support import compiled

    saver = make_saver()
    g = compiled(saver)
    g.invoke({"topic": "a"}, thread_id="one")
    g.invoke({"topic": "b"}, thread_id="two")
    g.invoke(Command(resume="y"), thread_id="two")
    app = create_app(saver, [compiled(None)], config=StudioConfig(allowed_hosts=("testserver",)))
    with TestClient(app) as client:
        assert {t["thread_id"]: t["status"] for t in client.get("/api/threads").json()["threads"]} == {
            "one": "interrupted",
            "two": "idle",
        }
        assert client.get("/api/threads", params={"q": "tw"}).json()["threads"][0]["thread_id"] == "two"
        assert "topic" in client.get("/api/diff", params={"a": "one", "b": "two"}).json()["keys"]
        h = write_headers(client)
        assert client.post("/api/threads/two/fork", json={"thread_id": "three"}, headers=h).status_code == 201
        r = client.post("/api/threads/one/runs", json={"action": "resume", "resume": "z"}, headers=h)
        assert _wait_run(client, "one", r.json()["run_id"])["status"] == "done"
        assert client.get("/api/threads/one/state").json()["values"]["answer"] == "z"
        assert client.get("/").status_code == 200 and client.get("/threads/three").status_code == 200


def test_an_address_is_opened_and_closed_by_the_app(db: str) -> None:
    with TestClient(create_app(db, config=StudioConfig(allowed_hosts=("testserver",)))) as client:
        assert len(client.get("/api/threads").json()["threads"]) == 2
        assert db in client.get("/").text


def _without(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in keys}


def test_threads_and_checkpoints_have_the_command_lines_json_shape(client: TestClient, db: str) -> None:
    """One JSON shape per record: the Studio sends a thread and a checkpoint as ``plait threads``,
    ``history`` and ``state --json`` print them (a published contract), with its own fields
    added (a thread's lease and listing cursor, a checkpoint's writes, errors and trace), none renamed."""

    def plait(*args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "plait", *args, "--db", db, "--json"], capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout)

    printed = {t["thread_id"]: t for t in plait("threads")}
    sent = client.get("/api/threads").json()["threads"]
    assert {t["thread_id"]: _without(t, "lease", "cursor") for t in sent} == printed
    assert all(t["lease"] is None and t["cursor"] for t in sent)
    history = client.get("/api/threads/done/history").json()["checkpoints"]
    assert [_without(cp, "writes", "errors", "trace") for cp in history] == plait("history", "done")
    # ``plait state`` adds the thread's status and stored errors (the Studio's page shows them apart)
    printed_state = plait("state", "done")
    assert (printed_state["status"], printed_state["errors"]) == ("idle", [])
    assert _without(client.get("/api/threads/done/state").json(), "writes", "errors", "trace") == _without(
        printed_state, "status", "errors"
    )
    summary = client.get("/api/threads/waiting").json()
    extras = ("lease", "cursor", "next", "interrupts", "errors", "head", "runs")
    assert _without(summary, *extras) == printed["waiting"]
    assert _without(summary["head"], "writes", "errors", "trace") == _without(
        plait("state", "waiting"), "values", "status", "errors"
    )
    assert summary["status"] == plait("state", "waiting")["status"] == "interrupted"


def test_a_studio_runs_times_are_iso_utc_with_microseconds() -> None:
    run = StudioRun(id="r", thread_id="t", namespace="", action="continue", graph="g", started_at=0.5)
    assert run.to_json()["started_at"] == "1970-01-01T00:00:00.500000+00:00"
    assert run.to_json()["finished_at"] is None
    run.finished_at = 1.0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", run.to_json()["finished_at"])
