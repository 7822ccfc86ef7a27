"""Two sets of run tables in one database, one on the search path (``public``, as ``plait db
migrate`` without ``--schema`` leaves it) and one in a schema of its own: setting up and
using the second neither mistakes the first's tables for its own nor touches them.

Each test gets a database of its own, so that its ``public`` schema can hold run tables
without other tests (which share ``public`` of the test database) seeing them."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from plait.runs import Runs
from plait.runs._schema import RUNS_VERSION

from . import _run_flows as flows
from ._runs_support import worker_in_process

pytestmark = pytest.mark.postgres


@pytest.fixture
def scratch_db(postgres_dsn: str) -> Iterator[str]:
    """The DSN of a new, empty database, dropped afterwards."""
    name = f"plait_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield make_conninfo(postgres_dsn, dbname=name)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def rows_per_table(dsn: str, schema: str) -> dict[str, int]:
    """How many rows each table of ``schema`` holds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))]
        counts = {}
        for name in names:
            query = sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
            row = conn.execute(query).fetchone()
            assert row is not None
            counts[name] = int(row[0])
    return counts


async def set_up_public(dsn: str) -> str:
    """Run tables in ``public`` (through the search path), holding one run due now."""
    runs = Runs(dsn)
    assert await runs.amigrate() == (None, True)
    run_id = await runs.asubmit(flows.name("single"), {}, thread_id="public")
    await runs.aclose()
    return run_id


def test_a_schema_is_set_up_apart_from_run_tables_on_the_search_path(scratch_db: str) -> None:
    async def go() -> None:
        await set_up_public(scratch_db)
        runs = Runs(scratch_db, schema="x")
        assert await runs.amigrate() == (None, True)  # not "up to date": public's are not x's
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        run_id = await runs.asubmit(flows.name("single"), {}, thread_id="t", after=later)
        assert (await runs.aget(run_id)).status == "pending"
        assert [r.run_id for r in await runs.alist()] == [run_id]
        await runs.aclose()

    asyncio.run(go())
    public, x = rows_per_table(scratch_db, "public"), rows_per_table(scratch_db, "x")
    assert set(public) == set(x) and {"plait_run", "plait_run_migrations", "procrastinate_jobs"} <= set(x)
    assert x["plait_run"] == x["procrastinate_jobs"] == public["plait_run"] == 1
    assert x["plait_run_migrations"] == public["plait_run_migrations"] == RUNS_VERSION  # one row a version


def test_work_on_a_schema_leaves_the_run_and_job_tables_of_the_search_path_untouched(scratch_db: str) -> None:
    async def go() -> str:
        public_run = await set_up_public(scratch_db)
        before = rows_per_table(scratch_db, "public")
        runs = Runs(scratch_db, schema="x")
        await runs.amigrate()
        await runs.aclose()
        async with Runs(scratch_db, schema="x") as runs, worker_in_process(scratch_db, "x"):
            # a run the worker runs, one stopped by a newer one, a cancelled one, a schedule, a limit
            done = await runs.asubmit(flows.name("steps"), {"steps": 2, "tag": "x"}, thread_id="x")
            assert (await runs.ajoin(done, timeout=30)).status == "success"
            later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            stopped = await runs.asubmit(flows.name("single"), {}, thread_id="y", after=later)
            await runs.asubmit(flows.name("single"), {}, thread_id="y", multitask="interrupt", after=later)
            assert (await runs.aget(stopped)).status == "interrupted"
            assert await runs.acancel(await runs.asubmit(flows.name("single"), {}, thread_id="z", after=later))
            schedule_id = await runs.aschedule(flows.name("single"), "* * * * * *", thread_id="ticks")
            await runs.aset_limit(flows.name("steps"), max_running=3)
            for _ in range(100):  # the schedule fires once a second
                if any(r.schedule_id == schedule_id for r in await runs.alist(thread_id="ticks")):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the schedule never fired")
            await runs.aunschedule(schedule_id)
        assert rows_per_table(scratch_db, "public") == before
        return public_run

    public_run = asyncio.run(go())

    async def public_run_status() -> str:
        async with Runs(scratch_db) as runs:
            return (await runs.aget(public_run)).status

    assert asyncio.run(public_run_status()) == "pending"  # x's worker never took public's job
