"""Submitting, reading, listing, waiting for, streaming and cancelling runs, with one worker in
this process; statuses and errors as stored."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from plait.checkpoint.postgres import PostgresCheckpointer
from plait.errors import RunNotFoundError, RunWaitTimeoutError
from plait.runs import Runs

from . import _run_flows as flows
from ._runs_support import worker_in_process

pytestmark = pytest.mark.postgres

Body = Callable[[Runs, str, str], Awaitable[None]]


def with_worker(db: tuple[str, str], body: Body, *, worker: bool = True) -> None:
    dsn, schema = db

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs:
            if worker:
                async with worker_in_process(dsn, schema):
                    await body(runs, dsn, schema)
            else:
                await body(runs, dsn, schema)

    asyncio.run(go())


def test_a_submitted_run_is_run_by_the_worker_and_ends_success_with_its_output(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run_id = await runs.asubmit(flows.name("steps"), {"steps": 3, "tag": "a"}, thread_id="t1", metadata={"k": 1})
        run = await runs.ajoin(run_id, timeout=20)
        assert run.status == "success", run
        assert run.output["log"] == ["a:0", "a:1", "a:2"]
        assert run.attempts == 1 and run.worker is not None and run.started_at is not None
        assert run.metadata == {"k": 1} and run.finished_at is not None and run.start_checkpoint is None
        assert (await runs.aget(run_id)).status == "success"
        assert [r.run_id for r in await runs.alist(thread_id="t1")] == [run_id]
        # a second run on the thread continues it: its input lands on the thread's state
        second = await runs.asubmit(flows.name("steps"), {"steps": 1, "tag": "b"}, thread_id="t1")
        done = await runs.ajoin(second, timeout=20)
        assert done.output["log"] == ["a:0", "a:1", "a:2", "b:0"] and done.start_checkpoint is not None

    with_worker(runs_db, body)


def test_runs_on_namespaced_threads_whose_job_locks_read_alike_each_continue_their_own_thread(
    runs_db: tuple[str, str],
) -> None:
    # namespace "a/b" thread "c" and namespace "a" thread "b/c" have the same job lock text;
    # a worker that took the thread from the lock would read the other thread's head
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        store = PostgresCheckpointer(dsn, schema=schema)
        threads = [("a/b", "c", "x"), ("a", "b/c", "y")]
        for round in range(2):
            for namespace, thread_id, tag in threads:
                head = await store.aget(thread_id, namespace=namespace)
                run_id = await runs.asubmit(
                    flows.name("steps"), {"steps": 1, "tag": f"{tag}{round}"}, thread_id=thread_id, namespace=namespace
                )
                run = await runs.ajoin(run_id, timeout=20)
                assert run.status == "success" and run.namespace == namespace, run
                assert run.output["log"] == [f"{tag}{r}:0" for r in range(round + 1)]
                # the thread's own head as the run started, which a retry would compare with
                assert run.start_checkpoint == (head.id if head is not None else None)
        await store.aclose()

    with_worker(runs_db, body)


def test_a_run_is_claimed_with_its_jobs_fetch_as_an_attempt_of_that_job(runs_db: tuple[str, str]) -> None:
    # the fetch marks the run running for its job: one attempt, by "<worker>/job-<the run's job>"
    dsn, schema = runs_db

    async def go() -> None:
        async with Runs(dsn, schema=schema) as runs, worker_in_process(dsn, schema, name="claimer"):
            for i in range(3):
                run_id = await runs.asubmit(flows.name("steps"), {"steps": 1, "tag": "c"}, thread_id=f"c{i}")
                run = await runs.ajoin(run_id, timeout=20)
                async with runs.db.pool.connection() as conn, conn.cursor() as cur:
                    await cur.execute("SELECT job_id FROM plait_run WHERE run_id = %s", (run_id,))
                    row = await cur.fetchone()
                assert row is not None and run.status == "success" and run.attempts == 1
                assert run.worker == f"claimer/job-{row[0]}"

    asyncio.run(go())


def test_the_queue_keeps_no_job_of_a_run_that_ended(runs_db: tuple[str, str], caplog: pytest.LogCaptureFixture) -> None:
    # the job is deleted by the statement that records the run's end: no moment where the
    # run is seen ended and its job is still queued, and Procrastinate, which no longer
    # finishes the job itself, finds nothing to complain about
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        ids = [await runs.asubmit(flows.name("steps"), {"steps": 1, "tag": "q"}, thread_id=f"q{i}") for i in range(3)]
        ids.append(await runs.asubmit(flows.name("failing"), {}, thread_id="q-failing"))
        async with runs.db.pool.connection() as conn, conn.cursor() as cur:
            for run_id in ids:
                assert (await runs.ajoin(run_id, timeout=20)).status in ("success", "error")
                await cur.execute(
                    "SELECT count(*) FROM procrastinate_jobs j JOIN plait_run r ON r.job_id = j.id WHERE r.run_id = %s",
                    (run_id,),
                )
                assert await cur.fetchone() == (0,), "the run ended and its job is still in the queue"
            await cur.execute("SELECT count(*) FROM plait_run WHERE job_id IS NOT NULL AND run_id = ANY(%s)", (ids,))
            assert await cur.fetchone() == (len(ids),)

    with caplog.at_level(logging.WARNING):
        with_worker(runs_db, body)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_failing_node_ends_the_run_error_with_the_error_stored(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run = await runs.ajoin(await runs.asubmit(flows.name("failing"), {}, thread_id="f"), timeout=20)
        assert run.status == "error"
        assert run.error["type"] == "NodeError" and "this node always fails" in run.error["message"]

    with_worker(runs_db, body)


def test_a_run_with_no_input_on_a_thread_nothing_started_ends_error_at_once(runs_db: tuple[str, str]) -> None:
    """Not a store failure to retry: every attempt would find the thread empty the same way."""

    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run = await runs.ajoin(await runs.asubmit(flows.name("single"), None, thread_id="empty"), timeout=20)
        assert run.status == "error" and run.error["type"] == "CheckpointNotFoundError", run
        assert run.attempts == 1

    with_worker(runs_db, body)


def test_an_interrupt_pauses_the_run_and_a_resume_run_answers_it(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run = await runs.ajoin(await runs.asubmit(flows.name("asking"), {}, thread_id="h"), timeout=20)
        assert run.status == "interrupted" and run.error is None
        assert run.output["__interrupt__"][0]["value"] == {"question": "yes?"}
        assert run.output["steps"] == 1 and run.output["answer"] is None  # the state, as invoke returns it
        answered = await runs.asubmit(flows.name("asking"), thread_id="h", resume="yes")
        done = await runs.ajoin(answered, timeout=20)
        assert done.status == "success" and done.output["answer"] == "yes"

    with_worker(runs_db, body)


def test_a_run_that_stops_at_a_breakpoint_ends_interrupted_with_its_state_and_the_next_run_goes_on(
    runs_db: tuple[str, str],
) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run = await runs.ajoin(await runs.asubmit(flows.name("held"), {}, thread_id="bp"), timeout=20)
        assert run.status == "interrupted" and run.error is None, run
        assert run.output["log"] == [] and run.output["steps"] == 1 and run.output["__interrupt__"] == []
        after = await runs.ajoin(await runs.asubmit(flows.name("held"), None, thread_id="bp"), timeout=20)
        assert after.status == "success" and after.output["log"] == ["one"] and "__interrupt__" not in after.output

    with_worker(runs_db, body)


def test_a_run_of_a_graph_the_worker_lacks_or_that_changed_ends_error(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run = await runs.ajoin(await runs.asubmit("nowhere.py:graph", {}, thread_id="u"), timeout=20)
        assert run.status == "error" and run.error["type"] == "UnknownGraphError"
        assert "nowhere.py:graph" in run.error["message"] and run.attempts == 0
        paused = await runs.ajoin(await runs.asubmit(flows.name("asking"), {}, thread_id="g"), timeout=20)
        assert paused.status == "interrupted"  # the thread waits in node "ask", which `steps` lacks
        changed = await runs.ajoin(await runs.asubmit(flows.name("steps"), thread_id="g"), timeout=20)
        assert changed.status == "error" and changed.error["type"] == "GraphChangedError"

    with_worker(runs_db, body)


def test_a_pending_run_is_cancelled_before_it_starts_and_a_running_one_at_once(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        pending = await runs.asubmit(flows.name("single"), {}, thread_id="c1", after=later)
        assert await runs.acancel(pending) is True
        assert (await runs.aget(pending)).status == "cancelled"
        assert await runs.acancel(pending) is False
        long = await runs.asubmit(flows.name("steps"), {"steps": 1000, "pause": 0.02, "tag": "z"}, thread_id="c2")
        async for item in runs.astream(long, timeout=20):
            if item["data"].get("status") == "running":
                break
        assert await runs.acancel(long) is True
        run = await runs.ajoin(long, timeout=20)
        assert run.status == "cancelled" and run.error["type"] == "Cancelled"
        with pytest.raises(RunNotFoundError):
            await runs.acancel("no-such-run")

    with_worker(runs_db, body)


def test_wait_gives_up_with_the_status_and_a_timeout_ends_a_long_run(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run_id = await runs.asubmit(flows.name("single"), {}, thread_id="w")
        with pytest.raises(RunWaitTimeoutError) as info:
            await runs.ajoin(run_id, timeout=0.2)
        assert info.value.status == "pending" and isinstance(info.value, TimeoutError)
        async with worker_in_process(dsn, schema):
            assert (await runs.ajoin(run_id, timeout=20)).status == "success"
            slow = await runs.asubmit(
                flows.name("steps"), {"steps": 1000, "pause": 0.02, "tag": "s"}, thread_id="slow", timeout=0.5
            )
            run = await runs.ajoin(slow, timeout=20)
            assert run.status == "timeout" and "0.5s" in run.error["message"]

    with_worker(runs_db, body, worker=False)


def test_stream_gives_the_modes_asked_for_from_the_worker_then_the_final_status(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        run_id = await runs.asubmit(
            flows.name("steps"), {"steps": 2, "tag": "e"}, thread_id="st", stream_mode=["updates", "events"]
        )
        items = [item async for item in runs.astream(run_id, timeout=20)]
        modes = [i["mode"] for i in items]
        assert modes[0] == "status" and items[0]["data"]["status"] == "running"
        assert items[-1] == {"mode": "status", "data": {"status": "success", "error": None}}
        updates = [i["data"] for i in items if i["mode"] == "updates"]
        assert updates == [{"step": {"log": ["e:0"]}}, {"step": {"log": ["e:1"]}}]
        kinds = [i["data"]["kind"] for i in items if i["mode"] == "events"]
        assert kinds.count("node_started") == 2 and "checkpoint_saved" in kinds and kinds[-1] == "run_finished"
        # a run submitted without stream_mode streams its status only
        plain = await runs.asubmit(flows.name("single"), {}, thread_id="st2")
        statuses = [i async for i in runs.astream(plain, timeout=20)]
        assert statuses[-1]["data"]["status"] == "success" and all(i["mode"] == "status" for i in statuses)

    with_worker(runs_db, body)


def test_list_filters_and_pages_newest_first(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        ids = [
            await runs.asubmit(flows.name("single"), {}, thread_id=f"l{i % 2}", after=later, multitask="enqueue")
            for i in range(5)
        ]
        assert [r.run_id for r in await runs.alist()] == ids[::-1]
        assert [r.run_id for r in await runs.alist(thread_id="l0")] == [ids[4], ids[2], ids[0]]
        page = await runs.alist(limit=2)
        rest = await runs.alist(limit=10, before=page[-1].run_id)
        assert [r.run_id for r in page + rest] == ids[::-1]
        await runs.acancel(ids[1])
        assert [r.run_id for r in await runs.alist(status="cancelled")] == [ids[1]]
        assert await runs.alist(graph="other.py:g") == []
        with pytest.raises(ValueError, match="not a run status"):
            await runs.alist(status="done")  # type: ignore[arg-type]

    with_worker(runs_db, body, worker=False)


def test_the_sync_twins_do_what_the_async_methods_do(runs_db: tuple[str, str]) -> None:
    dsn, schema = runs_db
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    with Runs(dsn, schema=schema) as runs:
        run_id = runs.submit(flows.name("single"), {}, thread_id="sync", after=later)
        assert runs.get(run_id).status == "pending"
        assert [r.run_id for r in runs.list(thread_id="sync")] == [run_id]
        assert runs.cancel(run_id) is True
        assert runs.join(run_id, timeout=5).status == "cancelled"
        assert [i["data"]["status"] for i in runs.stream(run_id, timeout=5)] == ["cancelled"]


def test_bad_arguments_are_refused_before_anything_is_stored(runs_db: tuple[str, str]) -> None:
    async def body(runs: Runs, dsn: str, schema: str) -> None:
        bad: list[dict[str, Any]] = [
            {"multitask": "queue"},
            {"stream_mode": "everything"},
            {"after": datetime.datetime(2030, 1, 1)},
        ]
        for options in bad:
            with pytest.raises(ValueError):
                await runs.asubmit(flows.name("single"), {}, thread_id="bad", **options)
        assert await runs.alist() == []

    with_worker(runs_db, body, worker=False)
