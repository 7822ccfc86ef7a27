"""The runs schema: plait's run tables, and the job queue's (Procrastinate's) tables beside them.

Two components share the database with the checkpoint store, each with its own version, so
that one can move without the other:

* plait's run tables (``plait_run``, ``plait_run_event``, ``plait_schedule``,
  ``plait_run_limit``, ``plait_run_meta``): a component of the per-component migrations
  the checkpoint store uses (:mod:`plait.checkpoint._migrations`), versioned in
  ``plait_run_migrations`` (the table and the layout the run tables always had, so a
  database set up before is at version 1 as it stands): a migration is never edited once
  released, a newer schema than this code knows is refused;
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

Where the tables are: in the chosen Postgres schema, or without one in the connection's
current schema (the first of its search path that exists). Every check of what exists, and
every statement here, names that schema: an unqualified name is looked up through the
search path, and a check that found another schema's tables (``public``'s, say) would take
them for this one's and leave it unset. Procrastinate's own SQL is unqualified, and so are
plait's statements on the run tables elsewhere: the connections of :mod:`plait.runs` put
the chosen schema alone on their search path (see :func:`plait.runs._db.connect_kwargs`),
so nothing they run can reach another schema's tables.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plait.checkpoint._migrations import Component
from plait.errors import QueueSchemaError, RunsError
from plait.runs._db import connect_kwargs, ident

__all__ = [
    "RUNS_VERSION",
    "RUN_TABLES_V1",
    "TESTED_QUEUE_SCHEMA",
    "check_schema",
    "installed_queue_schema",
    "migrate",
    "run_tables",
]

TESTED_QUEUE_SCHEMA = "03.04.00_50_post_add_retry_failed_job_procedure"
"""The newest Procrastinate migration in the schema plait was tested with (Procrastinate 3.10)."""

_MIGRATION_LOCK = 0x706C61697252  # "plaitR": pg_advisory_xact_lock key of migrate()

_JOBS_LOCK_INDEX = (
    "CREATE INDEX IF NOT EXISTS plait_jobs_lock ON {S}.procrastinate_jobs (lock) WHERE status IN ('todo', 'doing')"
)
"""plait's index on Procrastinate's jobs table (see the module docstring)."""

RUN_TABLES_V1 = (
    """CREATE TABLE IF NOT EXISTS {P}run (
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
    "CREATE INDEX IF NOT EXISTS plait_run_thread ON {P}run (ns, thread_id, seq)",
    "CREATE INDEX IF NOT EXISTS plait_run_status ON {P}run (status, seq)",
    "CREATE INDEX IF NOT EXISTS plait_run_graph ON {P}run (graph, seq)",
    """CREATE TABLE IF NOT EXISTS {P}run_event (
        run_id text NOT NULL REFERENCES {P}run (run_id) ON DELETE CASCADE,
        seq integer NOT NULL,
        event bytea NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS {P}schedule (
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
    """CREATE TABLE IF NOT EXISTS {P}run_limit (
        graph text PRIMARY KEY,
        max_running integer,
        rate double precision,
        burst double precision,
        tokens double precision NOT NULL DEFAULT 0,
        refilled_at double precision NOT NULL DEFAULT 0
    )""",
    "CREATE TABLE IF NOT EXISTS {P}run_meta (key text PRIMARY KEY, value text NOT NULL)",
)
"""Version 1 of the run tables; ``{P}`` is the schema's name and ``plait_``."""

_WHERE = (
    "SELECT w.s, to_regclass(quote_ident(w.s) || '.plait_run_migrations') IS NOT NULL, "
    "to_regclass(quote_ident(w.s) || '.plait_run_meta') IS NOT NULL, "
    "to_regclass(quote_ident(w.s) || '.procrastinate_jobs') IS NOT NULL "
    "FROM (SELECT coalesce(%s, current_schema()) AS s) w"
)
"""The schema of the tables (the chosen one, or the current one), and which of the run
tables' version table, plait's meta table and Procrastinate's jobs table it holds."""


@dataclass(frozen=True, slots=True)
class _Postgres:
    """What the run tables' migrations need to know of PostgreSQL."""

    real: str = "DOUBLE PRECISION"
    table_exists: str = "SELECT to_regclass(%s)::text"

    @property
    def table_exists_param(self) -> Callable[[str], str]:
        return str

    def q(self, sql: str) -> str:
        return sql.replace("?", "%s")


def run_tables(schema: str) -> Component:
    """The run tables of ``schema``, as a component of the database's migrations."""
    prefix = f"{ident(schema)}.plait_"
    return Component(
        name="run tables",
        table=prefix + "run_migrations",
        migrations={v: tuple(s.replace("{P}", prefix) for s in m) for v, m in _MIGRATIONS.items()},
        dialect=_Postgres(),
    )


RUN_TABLES_V2 = (
    "ALTER TABLE {P}run ADD COLUMN IF NOT EXISTS options bytea",
    """CREATE TABLE IF NOT EXISTS {P}serve_thread (
        thread_id text PRIMARY KEY,
        metadata bytea NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS plait_serve_thread_updated ON {P}serve_thread (updated_at, thread_id)",
)
"""Version 2: a run's ``options`` (what ``plait serve`` asks of a run beyond its input: a
``Command``'s update and goto, the checkpoint to start from, breakpoints, durability, and the
stream as the LangGraph API's events), and the API server's threads (their metadata)."""

RUN_TABLES_V3 = ("ALTER TABLE {P}run ADD COLUMN IF NOT EXISTS span text",)
"""Version 3: the ``plait.run`` span of a run's latest attempt, when traced (``<trace id>-<span
id>``, hex), stored as the attempt starts: the next attempt's span links to it even when the
worker died before exporting it."""

_MIGRATIONS = {1: RUN_TABLES_V1, 2: RUN_TABLES_V2, 3: RUN_TABLES_V3}

RUNS_VERSION = max(_MIGRATIONS)
"""The version of plait's run tables that this code reads and writes."""


def installed_queue_schema() -> str:
    """The newest migration of the installed Procrastinate: the schema its ``schema.sql`` makes."""
    from procrastinate import schema

    names = sorted(p.stem for p in pathlib.Path(schema.migrations_path).glob("*.sql"))
    return names[-1] if names else "(none)"


def _queue_schema_sql() -> str:
    from procrastinate import schema

    return schema.SchemaManager.get_schema()


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


def _nowhere(store: str) -> RunsError:
    return RunsError(
        f"{store}: the connection's search_path names no schema that exists, so plait has nowhere to keep "
        "its run tables; pass schema=... (--schema NAME) naming one, or create the schema first"
    )


def _newer(store: str, found: int) -> QueueSchemaError:
    return QueueSchemaError(
        f"{store} (run tables)", str(found), str(RUNS_VERSION), "it was written by a newer plait; upgrade plait"
    )


def _queue_version(cur: Any, where: str) -> str | None:
    cur.execute(f"SELECT value FROM {ident(where)}.plait_run_meta WHERE key = 'queue_schema'")
    row = cur.fetchone()
    return None if row is None else str(row[0])


def migrate(dsn: str, schema: str | None, store: str) -> tuple[int | None, bool]:
    """Create or upgrade plait's run tables, apply Procrastinate's schema and add plait's
    index on its jobs, in one transaction under an advisory lock (concurrent calls are
    safe). Blocking, on a connection of its own: the migrations are the checkpoint store's,
    written against a DB-API cursor.

    Returns:
        The run tables' version found before (None: none), and whether Procrastinate's schema
        was applied now.

    Raises:
        QueueSchemaError: the run tables are newer than this plait, the installed Procrastinate
            is not the one plait was tested with, or the database holds a Procrastinate schema
            plait did not apply or at another version.
    """
    import psycopg

    _refuse_installed(store)
    applied = False
    with (
        psycopg.connect(dsn, autocommit=True, **connect_kwargs(schema)) as conn,
        conn.transaction(),
        conn.cursor() as cur,
    ):
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        where, _, has_meta, has_jobs = cur.execute(_WHERE, (schema,)).fetchone() or (None, False, False, False)
        if where is None:
            raise _nowhere(store)
        tables = run_tables(where)
        found = tables.version(cur)
        if found > tables.latest:
            raise _newer(store, found)
        tables.migrate(cur, store)
        recorded = _queue_version(cur, where) if has_meta else None
        if recorded is None:
            if has_jobs:
                raise QueueSchemaError(
                    f"{store} (job queue)",
                    "unknown",
                    TESTED_QUEUE_SCHEMA,
                    "it holds a Procrastinate schema that plait did not apply, so its version is unknown. Give "
                    "plait a Postgres schema of its own (--schema / schema=), or drop the procrastinate_* objects "
                    "if nothing else uses them, then run `plait db migrate` again",
                )
            cur.execute(_queue_schema_sql())
            cur.execute(
                f"INSERT INTO {ident(where)}.plait_run_meta (key, value) VALUES ('queue_schema', %s)",
                (TESTED_QUEUE_SCHEMA,),
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
        cur.execute(_JOBS_LOCK_INDEX.replace("{S}", ident(where)))
    return found or None, applied


async def check_schema(conn: Any, schema: str | None, store: str) -> None:
    """Refuse a database whose run tables or job-queue schema this plait cannot use (two
    round trips: where the tables are and which exist, then their versions).

    Raises:
        QueueSchemaError: not set up (run ``plait db migrate``), or at another version.
    """
    _refuse_installed(store)
    found: int | None = None
    recorded: str | None = None
    async with conn.cursor() as cur:
        await cur.execute(_WHERE, (schema,))
        where, has_versions, has_meta, _ = await cur.fetchone() or (None, False, False, False)
        if where is not None and (has_versions or has_meta):
            q = ident(where)
            await cur.execute(
                "SELECT "
                + (f"(SELECT max(version) FROM {q}.plait_run_migrations), " if has_versions else "NULL, ")
                + (f"(SELECT value FROM {q}.plait_run_meta WHERE key = 'queue_schema')" if has_meta else "NULL")
            )
            found, recorded = await cur.fetchone() or (None, None)
    if found is None or found < RUNS_VERSION:
        raise QueueSchemaError(
            f"{store} (run tables)",
            None if found is None else str(found),
            str(RUNS_VERSION),
            "run `plait db migrate --db DSN` (or runs.migrate()) to set it up",
        )
    if found > RUNS_VERSION:
        raise _newer(store, found)
    if recorded != TESTED_QUEUE_SCHEMA:
        raise QueueSchemaError(
            f"{store} (job queue)",
            recorded,
            TESTED_QUEUE_SCHEMA,
            "run `plait db migrate --db DSN` to set it up"
            if recorded is None
            else "its Procrastinate schema is not the one this plait was tested with",
        )
