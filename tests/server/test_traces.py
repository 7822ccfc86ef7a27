"""The trace of the run that wrote each checkpoint (its ``trace`` metadata), on the thread page
and in the JSON API; linked to a tracing UI with ``trace_url`` (``plait studio --trace-url``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the traced runs need opentelemetry-sdk (the dev extra)")

from fastapi.testclient import TestClient  # noqa: E402

from plait import SqliteCheckpointer  # noqa: E402
from plait.errors import TraceUrlError  # noqa: E402
from plait.server import StudioConfig, create_app  # noqa: E402
from plait.server.traces import TraceLinks, check_trace_url, trace_of, traces_by  # noqa: E402

from ._studio_support import make_client  # noqa: E402
from ._trace_support import JAEGER, seed_traced  # noqa: E402


@pytest.fixture
def traced(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    db = str(tmp_path / "traced.db")
    return db, seed_traced(db)


@pytest.fixture
def linked(traced: tuple[str, dict[str, Any]]) -> Iterator[TestClient]:
    saver = SqliteCheckpointer(traced[0])
    with make_client(saver, trace_url=JAEGER) as c:
        yield c
    saver.close()


def _rows(page: str) -> list[str]:
    return re.findall(r"<li data-id=.*?</li>", page, flags=re.S)


def test_the_api_gives_each_checkpoint_the_trace_of_the_run_that_wrote_it(
    linked: TestClient, traced: tuple[str, dict[str, Any]]
) -> None:
    ids = traced[1]
    history = linked.get("/api/threads/traced/history").json()["checkpoints"]
    by_step = {cp["step"]: cp["trace"] for cp in history}
    # the input and research's step by the run that paused, ask's (answered) by the run that resumed
    paused, resumed = ids["paused"], ids["resumed"]
    assert [by_step[s]["trace_id"] for s in sorted(by_step)] == [paused[0], paused[0], resumed[0]]
    head = history[0]
    assert head["trace"] == {
        "trace_id": resumed[0],
        "span_id": resumed[1],
        "url": f"http://localhost:16686/trace/{resumed[0]}?span={resumed[1]}",
    }
    assert head["metadata"]["trace"] == {"trace_id": resumed[0], "span_id": resumed[1]}
    state = linked.get("/api/threads/traced/state", params={"checkpoint_id": history[-1]["checkpoint_id"]}).json()
    assert state["trace"]["trace_id"] == paused[0] and state["trace"]["url"].endswith(f"?span={paused[1]}")
    assert linked.get("/api/threads/traced").json()["head"]["trace"] == head["trace"]

    untraced = linked.get("/api/threads/plain/history").json()["checkpoints"]
    assert untraced and all(cp["trace"] is None and "trace" not in cp["metadata"] for cp in untraced)
    assert linked.get("/api/threads/plain").json()["head"]["trace"] is None


def test_without_a_template_the_api_gives_the_ids_unlinked(traced: tuple[str, dict[str, Any]]) -> None:
    saver = SqliteCheckpointer(traced[0])
    with make_client(saver) as c:
        head = c.get("/api/threads/traced/state").json()
        assert head["trace"] == {"trace_id": traced[1]["resumed"][0], "span_id": traced[1]["resumed"][1], "url": None}
    saver.close()


def test_the_thread_page_links_each_step_to_its_runs_trace(
    linked: TestClient, traced: tuple[str, dict[str, Any]]
) -> None:
    paused, resumed = traced[1]["paused"], traced[1]["resumed"]
    page = linked.get("/threads/traced").text
    rows = _rows(page)
    assert len(rows) == 3
    url = f"http://localhost:16686/trace/{resumed[0]}?span={resumed[1]}".replace("&", "&amp;")
    assert f'<a class="trace" href="{url}" target="_blank" rel="noopener noreferrer"' in rows[0]
    assert f"trace <code>{resumed[0][:8]}</code>" in rows[0]
    assert all(f'data-trace-id="{paused[0]}"' in row for row in rows[1:])
    # the selected checkpoint (the head) names its run's whole trace and span ids
    (detail,) = re.findall(r'<p class="trace-of".*?</p>', page, flags=re.S)
    assert resumed[0] in detail and resumed[1] in detail and 'target="_blank"' in detail


def test_a_thread_without_traces_and_a_studio_without_a_template_show_no_links(
    linked: TestClient, traced: tuple[str, dict[str, Any]]
) -> None:
    page = linked.get("/threads/plain").text
    assert 'class="trace' not in page and "trace-of" not in page
    saver = SqliteCheckpointer(traced[0])
    with make_client(saver) as c:
        page = c.get("/threads/traced").text
        assert all('<span class="trace"' in row for row in _rows(page)) and '<a class="trace"' not in page
        assert '<p class="trace-of" id="trace-of">Written by the run of <span class="trace"' in page
        assert "16686" not in page
    saver.close()


def test_metadata_of_another_shape_names_no_trace() -> None:
    good = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}
    assert trace_of({"trace": good}) is not None
    for odd in (
        None,
        "4bf92f3577b34da6a3ce929d0e0e4736",
        {"trace_id": good["trace_id"]},
        {**good, "trace_id": "0" * 32},
        {**good, "trace_id": good["trace_id"].upper()},
        {**good, "span_id": "x" * 16},
        {**good, "trace_id": good["trace_id"] + '"><script>'},
    ):
        assert trace_of({"trace": odd}) is None, odd
    assert TraceLinks().json({}) is None


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("http://localhost:16686/trace/", "no {trace_id}"),
        ("javascript:alert({trace_id})", "http:// or https://"),
        ("/trace/{trace_id}", "http:// or https://"),
        ("http:///{trace_id}", "with a host"),
        ("http://x/{trace_id}/{service}", "'service'"),
        ("http://x/{trace_id", "literal brace"),
    ],
)
def test_a_template_that_cannot_link_is_refused_at_startup(template: str, problem: str, tmp_path: Path) -> None:
    with pytest.raises(TraceUrlError) as caught:
        create_app(str(tmp_path / "never.db"), config=StudioConfig(trace_url=template))
    assert problem in str(caught.value) and "--trace-url" in str(caught.value)
    assert not (tmp_path / "never.db").exists()  # refused before the store was opened
    assert check_trace_url("https://ui.example/t/{trace_id}#{{span}}") == "https://ui.example/t/{trace_id}#{{span}}"


def test_a_queued_runs_traces_are_those_of_the_checkpoints_its_worker_wrote() -> None:
    from plait.checkpoint.model import Checkpoint

    def cp(step: int, owner: str | None, trace: str | None) -> Checkpoint:
        meta: dict[str, Any] = {"source": "loop", "step": step}
        if owner is not None:
            meta["owner"] = owner
        if trace is not None:
            meta["trace"] = {"trace_id": trace * 32, "span_id": "1" * 16}
        return Checkpoint(thread_id="t", id=f"c{step}", parent_id=None, step=step, values={}, metadata=meta)

    newest_first = [
        cp(5, "w2/job-7 (attempt 2)", "c"),
        cp(4, "w1/job-7", "b"),
        cp(3, "w1/job-7", "b"),
        cp(2, "w1/job-70", "e"),  # another job of the same worker
        cp(1, "w1/job-7", None),  # written untraced
        cp(0, None, "a"),  # an input, written by no worker
    ]
    assert [t.trace_id[0] for t in traces_by(newest_first, "w1/job-7")] == ["b"]
    assert [t.trace_id[0] for t in traces_by(newest_first, "w2/job-7")] == ["c"]
    assert traces_by(newest_first, None) == [] and traces_by(newest_first, "w3/job-1") == []


@pytest.mark.postgres
def test_a_queued_runs_page_links_the_traces_its_worker_wrote(queue_db: tuple[str, str], queue_worker: Any) -> None:
    from plait.runs import Runs

    from ._queue_support import flows, studio_on
    from ._timeline_support import write_step

    dsn, schema = queue_db
    queue_worker()
    with Runs(dsn, schema=schema) as runs:
        run_id = runs.submit(flows.name("single"), {}, thread_id="queued")
        runs.join(run_id, timeout=60)
        worker = runs.get(run_id).worker
    assert worker
    c, store = studio_on(dsn, schema, trace_url=JAEGER)
    with c:
        assert 'id="run-traces"' not in c.get(f"/runs/{run_id}").text  # the worker was not traced
        # what a traced worker's run adds: its owner and its run span's ids on a checkpoint
        trace = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}
        write_step(store, "queued", {"tag": "traced"}, metadata={"owner": worker, "trace": trace})
        write_step(
            store,
            "queued",
            {"tag": "other"},
            metadata={"owner": "elsewhere/job-1", "trace": {**trace, "trace_id": "5" * 32}},
        )
        (row,) = re.findall(r'<tr id="run-traces">.*?</tr>', c.get(f"/runs/{run_id}").text, flags=re.S)
        href = JAEGER.format(**trace).replace("&", "&amp;")
        assert f'<a class="trace" href="{href}" target="_blank" rel="noopener noreferrer"' in row
        assert "5" * 32 not in row
    store.close()


@pytest.mark.postgres
def test_a_queued_runs_page_shows_the_span_its_latest_attempt_stored(
    queue_db: tuple[str, str], queue_worker: Any
) -> None:
    """A traced attempt stores its run span in the run's row before its first step: the page
    links that trace even when no checkpoint of the attempt names it (its worker died first)."""
    import psycopg

    from plait.runs import Runs

    from ._queue_support import flows, studio_on

    dsn, schema = queue_db
    queue_worker()
    with Runs(dsn, schema=schema) as runs:
        run_id = runs.submit(flows.name("single"), {}, thread_id="stored")
        runs.join(run_id, timeout=60)
    trace_id, span_id = "6" * 32, "7" * 16
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".plait_run SET span = %s WHERE run_id = %s', (f"{trace_id}-{span_id}", run_id))
    with Runs(dsn, schema=schema) as runs:
        assert runs.get(run_id).trace == {"trace_id": trace_id, "span_id": span_id}
    c, store = studio_on(dsn, schema, trace_url=JAEGER)
    with c:
        (row,) = re.findall(r'<tr id="run-traces">.*?</tr>', c.get(f"/runs/{run_id}").text, flags=re.S)
        assert f'data-trace-id="{trace_id}"' in row
    store.close()
