"""The run tables' own migrations, and Procrastinate's schema applied by plait and refused at
any version other than the one plait was tested with."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import psycopg
import pytest

from plait.errors import QueueSchemaError, RunsError
from plait.runs import Runs
from plait.runs._db import connect_kwargs
from plait.runs._schema import RUN_TABLES_V1, RUNS_VERSION, TESTED_QUEUE_SCHEMA, installed_queue_schema

pytestmark = pytest.mark.postgres


def sql(dsn: str, schema: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True, **connect_kwargs(schema)) as conn:
        conn.execute(statement)


def test_the_installed_procrastinate_is_the_one_plait_was_tested_with() -> None:
    assert installed_queue_schema() == TESTED_QUEUE_SCHEMA


def test_migrate_sets_up_both_components_once_and_is_safe_to_repeat(postgres_dsn: str, postgres_schema: str) -> None:
    async def go() -> None:
        runs = Runs(postgres_dsn, schema=postgres_schema)
        with pytest.raises(QueueSchemaError, match="plait db migrate"):
            await runs.aopen()
        assert await runs.amigrate() == (None, True)
        assert list(await asyncio.gather(runs.amigrate(), runs.amigrate())) == [(RUNS_VERSION, False)] * 2
        await runs.aopen()
        await runs.aclose()

    asyncio.run(go())


def test_migrate_adds_plaits_index_on_the_jobs_locks_also_to_a_database_set_up_without_it(
    runs_db: tuple[str, str],
) -> None:
    dsn, schema = runs_db

    def index() -> list[tuple[str, ...]]:
        with psycopg.connect(dsn, autocommit=True, **connect_kwargs(schema)) as conn:
            rows = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'plait_jobs_lock'", (schema,)
            ).fetchall()
        return [tuple(r) for r in rows]

    (found,) = index()
    assert "procrastinate_jobs USING btree (lock) WHERE" in found[0] and "'todo'" in found[0] and "'doing'" in found[0]
    sql(dsn, schema, "DROP INDEX plait_jobs_lock")  # a database set up by a plait before the index

    async def go() -> None:
        runs = Runs(dsn, schema=schema)
        await runs.aopen()  # usable without it
        assert await runs.amigrate() == (RUNS_VERSION, False)
        await runs.aclose()

    asyncio.run(go())
    assert index() == [found]


@pytest.mark.parametrize(
    ("tamper", "match"),
    [
        ("UPDATE plait_run_meta SET value = '02.00.00_01_old' WHERE key = 'queue_schema'", "not the one this plait"),
        ("INSERT INTO plait_run_migrations VALUES (99, 0)", "newer plait"),
    ],
)
def test_a_database_at_another_version_is_refused(runs_db: tuple[str, str], tamper: str, match: str) -> None:
    dsn, schema = runs_db
    sql(dsn, schema, tamper)

    async def go() -> None:
        runs = Runs(dsn, schema=schema)
        with pytest.raises(QueueSchemaError, match=match):
            await runs.aopen()
        with pytest.raises(QueueSchemaError, match=match):
            await runs.amigrate()
        await runs.aclose()

    asyncio.run(go())


def test_a_procrastinate_schema_plait_did_not_apply_is_refused(postgres_dsn: str, postgres_schema: str) -> None:
    from procrastinate import schema

    sql(postgres_dsn, postgres_schema, schema.SchemaManager.get_schema())

    async def go() -> None:
        runs = Runs(postgres_dsn, schema=postgres_schema)
        with pytest.raises(QueueSchemaError, match="did not apply") as info:
            await runs.amigrate()
        assert info.value.found == "unknown" and info.value.expected == TESTED_QUEUE_SCHEMA
        await runs.aclose()

    asyncio.run(go())


def test_run_tables_set_up_with_their_own_version_table_are_used_and_upgraded_in_place(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """A database set up by the plait whose run tables kept their own version table, apart from
    the per-component migrations: their layout, made by its statements, holding a run."""
    from procrastinate import schema

    old = [
        *(s.replace("{P}", "plait_") for s in RUN_TABLES_V1),
        "CREATE TABLE IF NOT EXISTS plait_run_migrations "
        "(version integer PRIMARY KEY, applied_at double precision NOT NULL)",
        "INSERT INTO plait_run_migrations VALUES (1, 1764547200)",
        schema.SchemaManager.get_schema(),
        f"INSERT INTO plait_run_meta (key, value) VALUES ('queue_schema', '{TESTED_QUEUE_SCHEMA}')",
        "CREATE INDEX IF NOT EXISTS plait_jobs_lock ON procrastinate_jobs (lock) WHERE status IN ('todo', 'doing')",
    ]
    for statement in old:
        sql(postgres_dsn, postgres_schema, statement)

    sql(
        postgres_dsn,
        postgres_schema,
        "INSERT INTO plait_run (run_id, graph, ns, thread_id, status, multitask, input, metadata, priority, queue, "
        "created_at, updated_at) VALUES ('r-old', 'g.py:graph', '', 'old', 'pending', 'reject', '{\"a\": 1}', "
        "'{\"m\": 2}', 3, 'plait', 1764547200, 1764547200)",
    )

    async def go() -> None:
        runs = Runs(postgres_dsn, schema=postgres_schema)
        with pytest.raises(QueueSchemaError, match="at version 1, this plait needs 3"):
            await runs.aopen()
        assert await runs.amigrate() == (1, False)  # upgraded in place: version 2 adds run options, 3 spans
        run = await runs.aget("r-old")
        assert (run.status, run.input, run.metadata, run.priority, run.thread_id, run.options) == (
            "pending",
            {"a": 1},
            {"m": 2},
            3,
            "old",
            None,
        )
        await runs.aclose()

    asyncio.run(go())
    with psycopg.connect(postgres_dsn, autocommit=True, **connect_kwargs(postgres_schema)) as conn:
        versions = conn.execute("SELECT version, applied_at FROM plait_run_migrations ORDER BY version").fetchall()
        assert versions[0] == (1, 1764547200) and [v for v, _ in versions] == [1, 2, 3]


def test_a_store_that_is_not_postgres_is_refused() -> None:
    with pytest.raises(RunsError, match="runs need PostgreSQL"):
        Runs("plait.db")


def plait(*args: str, schema: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGOPTIONS": f"-c search_path={schema}"}
    env.pop("PLAIT_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "plait", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_plait_db_migrate_sets_up_the_run_tables_and_the_queue_and_the_run_commands_use_them(
    postgres_dsn: str, postgres_schema: str
) -> None:
    db = ("--db", postgres_dsn)
    res = plait("db", "migrate", *db, "--json", schema=postgres_schema)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["runs"] == "run tables and job queue set up"
    res = plait("db", "migrate", *db, schema=postgres_schema)
    assert res.returncode == 0 and "run tables and job queue up to date" in res.stdout
    res = plait("submit", "g.py:graph", "--thread", "t", "--input", '{"a": 1}', "--delay", "3600", *db, "--json",
                schema=postgres_schema)  # fmt: skip
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)
    assert run["status"] == "pending" and run["input"] == {"a": 1} and run["created_at"].endswith("+00:00")
    res = plait("submit", "g.py:graph", "--thread", "t", *db, schema=postgres_schema)
    assert res.returncode == 1 and "has an active run" in res.stderr
    res = plait("runs", "--thread", "t", *db, "--json", schema=postgres_schema)
    assert [r["run_id"] for r in json.loads(res.stdout)] == [run["run_id"]]
    res = plait("run-cancel", run["run_id"], *db, schema=postgres_schema)
    assert res.returncode == 0 and "cancelled" in res.stdout
    res = plait("runs", "--status", "cancelled", *db, schema=postgres_schema)
    assert run["run_id"] in res.stdout
    res = plait("schedule", "g.py:graph", "--cron", "*/5 * * * *", *db, "--json", schema=postgres_schema)
    schedule_id = json.loads(res.stdout)["schedule_id"]
    res = plait("schedules", *db, schema=postgres_schema)
    assert schedule_id in res.stdout and "*/5 * * * *" in res.stdout
    res = plait("schedules", "--remove", schedule_id, *db, schema=postgres_schema)
    assert res.returncode == 0 and "removed" in res.stdout
    res = plait("schedule", "g.py:graph", "--cron", "sometimes", *db, schema=postgres_schema)
    assert res.returncode == 2 and "not a cron expression" in res.stderr
    res = plait("worker", *db, schema=postgres_schema)
    assert res.returncode == 2 and "--graph" in res.stderr
    res = plait("runs", "--db", "plait.db", schema=postgres_schema)
    assert res.returncode == 2 and "need PostgreSQL" in res.stderr
