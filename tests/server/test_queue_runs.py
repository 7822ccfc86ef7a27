"""The run queue's runs in the Studio: listed, filtered, paged and read through the API and the
pages, cancelled with the real ``runs.cancel`` (a pending run at once, a running one by its
worker), on a PostgreSQL schema with real runs driven by a real `plait worker`; and a store
without a run queue says how to get one instead of failing."""

from __future__ import annotations

import datetime
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import get_args

import pytest
from fastapi.testclient import TestClient

from plait.runs import RUN_STATUSES, Runs
from plait.server.api import RunStatusQ

from ._queue_support import flows, ledger_lines, studio_on, wait_for
from ._studio_support import ORIGIN, write_headers

Start = Callable[..., subprocess.Popen[bytes]]


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert m
    return m.group(1)


def test_the_api_knows_every_run_status() -> None:
    assert get_args(RunStatusQ) == RUN_STATUSES


def test_without_a_run_queue_the_runs_page_says_how_to_get_one_and_the_rest_works(client: TestClient) -> None:
    page = client.get("/runs")
    assert page.status_code == 200 and 'id="no-queue"' in page.text
    assert "has no run queue: runs are served by PostgreSQL only, and this store is a SQLite file" in page.text
    assert "plait studio --db postgresql://" in page.text
    assert '<a href="/">Threads</a> <a href="/runs">Runs</a>' in page.text  # the nav is there, and works
    assert client.get("/").status_code == 200
    for path in ("/api/runs", "/api/runs/some-run", "/api/events/runs"):
        r = client.get(path)
        assert r.status_code == 404 and r.json()["error"] == "NoRunQueueError", path
        assert "PostgreSQL only" in r.json()["message"]
    assert "has no run queue" in client.get("/runs/some-run").text
    r = client.post("/api/runs/some-run/cancel", headers=write_headers(client))
    assert r.status_code == 404 and r.json()["error"] == "NoRunQueueError"
    thread = client.get("/threads/waiting")
    assert thread.status_code == 200 and 'id="queue-runs"' not in thread.text
    assert "Waiting for an answer" in thread.text


def test_cancelling_needs_the_studios_origin_and_csrf_token(client: TestClient) -> None:
    token = write_headers(client)["X-CSRF-Token"]
    assert client.post("/api/runs/r/cancel", headers={"Origin": ORIGIN}).status_code == 403
    assert client.post("/api/runs/r/cancel", headers={"X-CSRF-Token": token}).status_code == 403
    r = client.post("/runs/r/cancel", data={"csrf_token": "guess"}, headers={"Origin": ORIGIN})
    assert r.status_code == 403


@pytest.mark.postgres
def test_a_postgres_store_without_the_run_tables_says_to_migrate_and_shows_runs_once_migrated(
    postgres_dsn: str, postgres_schema: str
) -> None:
    c, store = studio_on(postgres_dsn, postgres_schema)
    with c:
        page = c.get("/runs").text
        assert "its database has no run tables and job queue" in page
        assert "run `plait db migrate --db" in page and f"search_path={postgres_schema}" in page
        r = c.get("/api/runs")
        assert r.status_code == 404 and "plait db migrate" in r.json()["message"]
        runs = Runs(postgres_dsn, schema=postgres_schema)
        runs.migrate()  # while the Studio is open: the next page load finds the queue
        runs.close()
        page = c.get("/runs").text
        assert 'id="no-queue"' not in page and "no runs" in page and '<option value="timeout">' in page
        assert c.get("/api/runs").json() == {"runs": [], "next_cursor": None}
    store.close()


@pytest.mark.postgres
def test_the_queues_runs_are_listed_read_and_cancelled(
    queue_db: tuple[str, str], queue_worker: Start, tmp_path: Path
) -> None:
    dsn, schema = queue_db
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    queue_worker(env={"PLAIT_TEST_LEDGER": str(ledger), "PLAIT_TEST_GATE": str(gate)})
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    with Runs(dsn, schema=schema) as runs:
        ok = runs.submit(flows.name("single"), {}, thread_id="ok")
        bad = runs.submit(flows.name("failing"), {}, thread_id="bad")
        ask = runs.submit(flows.name("asking"), {}, thread_id="ask")
        for run_id in (ok, bad, ask):
            runs.join(run_id, timeout=60)
        waiting = runs.submit(flows.name("single"), {}, thread_id="later", after=later)
        long = runs.submit(flows.name("steps"), {"steps": 10, "tag": "g"}, thread_id="long")
        # the fourth step waits at the gate, which is never opened: the run stays running
        wait_for(lambda: len(ledger_lines(ledger)) >= 4, 60, "the long run's fourth step")
        newest_first = [long, waiting, ask, bad, ok]

        c, store = studio_on(dsn, schema)
        with c:
            # The API: newest first, each with its status; values only in a run's own view.
            body = c.get("/api/runs").json()
            assert [r["run_id"] for r in body["runs"]] == newest_first and body["next_cursor"] is None
            statuses = {r["run_id"]: r["status"] for r in body["runs"]}
            assert statuses == {long: "running", waiting: "pending", ask: "interrupted", bad: "error", ok: "success"}
            assert {r["run_id"] for r in body["runs"] if r["cancellable"]} == {long, waiting}
            assert "input" not in body["runs"][0] and body["runs"][0]["created_at"].endswith("+00:00")
            assert [r["run_id"] for r in c.get("/api/runs", params={"status": "error"}).json()["runs"]] == [bad]
            assert [r["run_id"] for r in c.get("/api/runs", params={"thread_id": "ok"}).json()["runs"]] == [ok]
            assert c.get("/api/runs", params={"status": "done"}).status_code == 422
            pages, cursor = [], None
            while True:
                page = c.get("/api/runs", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
                pages.append([r["run_id"] for r in page["runs"]])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert pages == [[long, waiting], [ask, bad], [ok]]
            failed = c.get(f"/api/runs/{bad}").json()
            assert failed["error"]["type"] == "NodeError" and "this node always fails" in failed["error"]["message"]
            assert failed["graph"] == flows.name("failing") and failed["thread_id"] == "bad" and failed["input"] == {}
            assert c.get(f"/api/runs/{ok}").json()["output"]["log"] == ["one"]
            r = c.get("/api/runs/no-such-run")
            assert r.status_code == 404 and r.json()["error"] == "RunNotFoundError"

            # The pages: the list with links, error summaries and Cancel for active runs only.
            page = c.get("/runs").text
            assert re.findall(r'<tr data-run="([^"]+)"', page) == newest_first
            assert page.count('class="cancel-run danger"') == 2
            assert 'href="/threads/bad"' in page and "NodeError: " in page and "this node always fails" in page
            only = c.get("/runs", params={"status": "error"}).text
            assert re.findall(r'<tr data-run="([^"]+)"', only) == [bad]
            assert re.findall(r'<tr data-run="([^"]+)"', c.get("/runs", params={"thread": "ask"}).text) == [ask]
            detail = c.get(f"/runs/{bad}").text
            assert 'id="run-error"' in detail and "this node always fails" in detail and "cancel-run" not in detail
            assert "nothing to cancel" in c.get(f"/runs/{ask}").text
            assert c.get("/runs/no-such-run").status_code == 404
            thread = c.get("/threads/bad").text
            assert 'id="queue-runs"' in thread and f'data-run="{bad}"' in thread and f'data-run="{ok}"' not in thread
            running = c.get("/threads/long").text  # its running run has a Cancel that comes back here
            assert f'action="/runs/{long}/cancel"' in running and 'name="back" value="/threads/long"' in running

            # Cancel the pending run with the page's form: it never starts.
            token = _csrf(page)
            r = c.post(f"/runs/{waiting}/cancel", data={"back": "/runs"}, headers={"Origin": ORIGIN})
            assert r.status_code == 403 and runs.get(waiting).status == "pending"
            r = c.post(
                f"/runs/{waiting}/cancel",
                data={"csrf_token": token, "back": "/runs?status=pending"},
                headers={"Origin": ORIGIN},
                follow_redirects=False,
            )
            assert r.status_code == 303 and r.headers["location"].startswith("/runs?status=pending&flash=")
            shown = c.get(r.headers["location"]).text
            assert f"run {waiting} cancelled: it is now cancelled" in shown
            assert runs.get(waiting).status == "cancelled"
            r = c.post(
                f"/runs/{ok}/cancel",
                data={"csrf_token": token, "back": "https://elsewhere.example/"},
                headers={"Origin": ORIGIN},
                follow_redirects=False,
            )
            assert r.headers["location"].startswith(f"/runs/{ok}?flash=")  # never a redirect off the Studio
            assert "had ended already (success): nothing to cancel" in c.get(r.headers["location"]).text

            # Cancel the running run through the API: its worker stops it, and it ends cancelled.
            r = c.post(f"/api/runs/{long}/cancel", params={"wait": 30}, headers=write_headers(c))
            assert r.status_code == 200 and r.json()["cancelled"] is True
            assert r.json()["run"]["status"] == "cancelled" and r.json()["run"]["cancellable"] is False
            again = c.post(f"/api/runs/{long}/cancel", headers=write_headers(c)).json()
            assert again["cancelled"] is False
            assert c.post("/api/runs/no-such-run/cancel", headers=write_headers(c)).status_code == 404
        store.close()
        stored = runs.get(long)
        assert stored.status == "cancelled" and stored.error["type"] == "Cancelled" and stored.finished_at
        assert len(ledger_lines(ledger)) == 4  # it stopped at the gate: no step after the cancel
