"""The runs schema: plait's run tables, and the job queue's (Procrastinate's) tables beside them.

Two components share the database with the checkpoint store, each with its own version, so
that one can move without the other:

* plait's run tables (``plait_run``, ``plait_run_event``, ``plait_schedule``,
  ``plait_run_limit``), versioned in ``plait_run_migrations`` like the checkpoint store's
  tables are in ``plait_migrations``: a migration is never edited once released, a newer
  schema than this code knows is refused;
* Procrastinate's schema, applied from the ``schema.sql`` of the installed Procrastinate the
  first time, and recorded in ``plait_run_meta`` under the name of the newest Procrastinate
  migration it contains. plait was tested with one such schema (:data:`TESTED_QUEUE_SCHEMA`),
  and refuses any other, found in the database or installed, with a message saying what to do,
  rather than let workers fetch jobs through functions whose meaning may have changed.

One index is plait's own on Procrastinate's jobs table, ``plait_jobs_lock`` (created, if
missing, by every :func:`migrate`; nothing refuses a database without it, and no
Procrastinate migration uses the name). Why: every job of a run carries its thread as its
lock, and Procrastinate's fetch rejects a candidate job whose lock has an earlier job
waiting or running. Its own index on (id, lock) cannot look a lock up, so that check scans
every waiting and running job: a fetch costs more the deeper the queue, and much more when
the table has no statistics (truncated, or filled faster than autovacuum analyses it), as
the planner then checks every waiting job (figures in docs/benchmarks.md).

Every name is unqualified: the connections of :mod:`plait.runs` set ``search_path`` to the
chosen Postgres schema (see :func:`plait.runs._db.connect_options`), which is also where
Procrastinate's own unqualified SQL then finds its tables.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

from plait.errors import QueueSchemaError

__all__ = [
    "RUNS_VERSION",
    "TESTED_QUEUE_SCHEMA",
    "check_schema",
    "installed_queue_schema",
    "migrate",
]

RUNS_VERSION = 1
"""The version of plait's run tables that this code reads and writes."""

TESTED_QUEUE_SCHEMA = "03.04.00_50_post_add_retry_failed_job_procedure"
"""The newest Procrastinate migration in the schema plait was tested with (Procrastinate 3.10)."""

_MIGRATION_LOCK = 0x706C61697252  # "plaitR": pg_advisory_xact_lock key of migrate()

JOBS_LOCK_INDEX = (
    "CREATE INDEX IF NOT EXISTS plait_jobs_lock ON procrastinate_jobs (lock) WHERE status IN ('todo', 'doing')"
)
"""plait's index on Procrastinate's jobs table (see the module docstring)."""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS plait_run (
            run_id text PRIMARY KEY,
            seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            graph text NOT NULL,
            ns text NOT NULL,
            thread_id text NOT NULL,
            status text NOT NULL,
            multitask text NOT NULL,
            input bytea,
            resume bytea,
            has_resume boolean NOT NULL DEFAULT false,
            context bytea,
            metadata bytea,
            priority integer NOT NULL DEFAULT 0,
            queue text NOT NULL,
            timeout double precision,
            job_id bigint,
            attempts integer NOT NULL DEFAULT 0,
            worker text,
            output bytea,
            error bytea,
            start_checkpoint text,
            started boolean NOT NULL DEFAULT false,
            stop text,
            rollback_of text[],
            stream text[],
            schedule_id text,
            tick bigint,
            created_at double precision NOT NULL,
            started_at double precision,
            finished_at double precision,
            updated_at double precision NOT NULL,
            UNIQUE (schedule_id, tick)
        )""",
        "CREATE INDEX IF NOT EXISTS plait_run_thread ON plait_run (ns, thread_id, seq)",
        "CREATE INDEX IF NOT EXISTS plait_run_status ON plait_run (status, seq)",
        "CREATE INDEX IF NOT EXISTS plait_run_graph ON plait_run (graph, seq)",
        """CREATE TABLE IF NOT EXISTS plait_run_event (
            run_id text NOT NULL REFERENCES plait_run (run_id) ON DELETE CASCADE,
            seq integer NOT NULL,
            event bytea NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE IF NOT EXISTS plait_schedule (
            schedule_id text PRIMARY KEY,
            graph text NOT NULL,
            cron text NOT NULL,
            input bytea,
            thread_id text,
            ns text NOT NULL,
            multitask text NOT NULL,
            metadata bytea,
            queue text NOT NULL,
            last_tick bigint,
            created_at double precision NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS plait_run_limit (
            graph text PRIMARY KEY,
            max_running integer,
            rate double precision,
            burst double precision,
            tokens double precision NOT NULL DEFAULT 0,
            refilled_at double precision NOT NULL DEFAULT 0
        )""",
        "CREATE TABLE IF NOT EXISTS plait_run_meta (key text PRIMARY KEY, value text NOT NULL)",
    ),
}


def installed_queue_schema() -> str:
    """The newest migration of the installed Procrastinate: the schema its ``schema.sql`` makes."""
    from procrastinate import schema

    names = sorted(p.stem for p in pathlib.Path(schema.migrations_path).glob("*.sql"))
    return names[-1] if names else "(none)"


def _queue_schema_sql() -> str:
    from procrastinate import schema

    return schema.SchemaManager.get_schema()


async def _exists(cur: Any, table: str) -> bool:
    await cur.execute("SELECT to_regclass(%s)::text", (table,))
    row = await cur.fetchone()
    return row is not None and row[0] is not None


async def _runs_version(cur: Any) -> int | None:
    if not await _exists(cur, "plait_run_migrations"):
        return None
    await cur.execute("SELECT max(version) FROM plait_run_migrations")
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


async def _queue_version(cur: Any) -> str | None:
    if not await _exists(cur, "plait_run_meta"):
        return None
    await cur.execute("SELECT value FROM plait_run_meta WHERE key = 'queue_schema'")
    row = await cur.fetchone()
    return None if row is None else str(row[0])


def _refuse_installed(store: str) -> None:
    installed = installed_queue_schema()
    if installed != TESTED_QUEUE_SCHEMA:
        import importlib.metadata

        version = importlib.metadata.version("procrastinate")
        raise QueueSchemaError(
            f"the installed Procrastinate {version}",
            installed,
            TESTED_QUEUE_SCHEMA,
            "plait was tested with Procrastinate 3.10 and its schema; install that version "
            f"(pip install 'plait[runs]') before using {store}",
        )


async def migrate(conn: Any, store: str) -> tuple[int | None, bool]:
    """Create or upgrade plait's run tables, apply Procrastinate's schema and add plait's
    index on its jobs, in one transaction under an advisory lock (concurrent calls are safe).

    Returns:
        The run tables' version found before (None: none), and whether Procrastinate's schema
        was applied now.

    Raises:
        QueueSchemaError: the run tables are newer than this plait, the installed Procrastinate
            is not the one plait was tested with, or the database holds a Procrastinate schema
            plait did not apply or at another version.
    """
    _refuse_installed(store)
    applied = False
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        found = await _runs_version(cur)
        if found is not None and found > RUNS_VERSION:
            raise QueueSchemaError(
                f"{store} (run tables)",
                str(found),
                str(RUNS_VERSION),
                "it was written by a newer plait; upgrade plait to use it",
            )
        await cur.execute(
            "CREATE TABLE IF NOT EXISTS plait_run_migrations "
            "(version integer PRIMARY KEY, applied_at double precision NOT NULL)"
        )
        for version in range((found or 0) + 1, RUNS_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                await cur.execute(statement)
            await cur.execute("INSERT INTO plait_run_migrations VALUES (%s, %s)", (version, time.time()))
        recorded = await _queue_version(cur)
        if recorded is None:
            if await _exists(cur, "procrastinate_jobs"):
                raise QueueSchemaError(
                    f"{store} (job queue)",
                    "unknown",
                    TESTED_QUEUE_SCHEMA,
                    "it holds a Procrastinate schema that plait did not apply, so its version is unknown. Give plait "
                    "a Postgres schema of its own (--schema / schema=), or drop the procrastinate_* objects if "
                    "nothing else uses them, then run `plait db migrate` again",
                )
            await cur.execute(_queue_schema_sql())
            await cur.execute(
                "INSERT INTO plait_run_meta (key, value) VALUES ('queue_schema', %s)", (TESTED_QUEUE_SCHEMA,)
            )
            applied = True
        elif recorded != TESTED_QUEUE_SCHEMA:
            raise QueueSchemaError(
                f"{store} (job queue)",
                recorded,
                TESTED_QUEUE_SCHEMA,
                "its Procrastinate schema is not the one this plait was tested with; use the plait that set it "
                "up, or migrate it with Procrastinate's own migrations to that version and record it in "
                "plait_run_meta",
            )
        await cur.execute(JOBS_LOCK_INDEX)
    return found, applied


async def check_schema(conn: Any, store: str) -> None:
    """Refuse a database whose run tables or job-queue schema this plait cannot use.

    Raises:
        QueueSchemaError: not set up (run ``plait db migrate``), or at another version.
    """
    _refuse_installed(store)
    async with conn.cursor() as cur:
        found = await _runs_version(cur)
        recorded = await _queue_version(cur)
    if found is None or found < RUNS_VERSION:
        raise QueueSchemaError(
            f"{store} (run tables)",
            None if found is None else str(found),
            str(RUNS_VERSION),
            "run `plait db migrate --db DSN` (or runs.migrate()) to set it up",
        )
    if found > RUNS_VERSION:
        raise QueueSchemaError(
            f"{store} (run tables)", str(found), str(RUNS_VERSION), "it was written by a newer plait; upgrade plait"
        )
    if recorded != TESTED_QUEUE_SCHEMA:
        raise QueueSchemaError(
            f"{store} (job queue)",
            recorded,
            TESTED_QUEUE_SCHEMA,
            "run `plait db migrate --db DSN` to set it up"
            if recorded is None
            else "its Procrastinate schema is not the one this plait was tested with",
        )
