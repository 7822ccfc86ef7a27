"""PostgreSQL change notices for the Studio: LISTEN/NOTIFY through a trigger of its own.

Why a trigger, and not a ``pg_notify`` in plait's commit path: the Studio is a reader that
comes and goes, and the commit path (and its schema version) belongs to the store. The
Studio's own migration adds, once per store, a statement-level trigger on the checkpoints,
pending-writes and threads tables that calls ``pg_notify('plait_studio', schema)``; every
commit by any process then wakes the Studio within a round trip. The trigger costs a commit
one notice (delivered only to listeners; none listening, it is dropped). When the trigger
cannot be created (no DDL rights) the Studio falls back to polling and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["CHANNEL", "install_trigger", "listen", "pg_target"]

CHANNEL = "plait_studio"
TABLES = ("checkpoints", "writes", "threads")
log = logging.getLogger("plait.server")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def pg_target(checkpointer: Any) -> tuple[str, str | None] | None:
    """``(conninfo, schema)`` of a PostgresCheckpointer; None for any other store."""
    from plait.checkpoint.postgres import PostgresCheckpointer

    if not isinstance(checkpointer, PostgresCheckpointer):
        return None
    conninfo = checkpointer._conninfo or getattr(checkpointer._pool, "conninfo", None)
    return (conninfo, checkpointer.schema) if conninfo else None


async def install_trigger(conn: Any, schema: str | None) -> None:
    """Create the notify function and triggers unless they are there (idempotent)."""
    where = _ident(schema) + "." if schema else ""
    found = await (
        await conn.execute(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.tgname = 'plait_studio_notify' AND n.nspname = coalesce(%s, current_schema())",
            (schema,),
        )
    ).fetchone()
    if found and found[0] == len(TABLES):
        return
    async with conn.transaction():
        await conn.execute(
            f"CREATE OR REPLACE FUNCTION {where}plait_studio_notify() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM pg_notify('{CHANNEL}', TG_TABLE_SCHEMA); RETURN NULL; END $$"
        )
        for table in TABLES:
            name = f"{where}plait_{table}"
            await conn.execute(f"DROP TRIGGER IF EXISTS plait_studio_notify ON {name}")
            await conn.execute(
                f"CREATE TRIGGER plait_studio_notify AFTER INSERT OR UPDATE OR DELETE ON {name} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {where}plait_studio_notify()"
            )


async def listen(conninfo: str, schema: str | None, wake: Callable[[], Awaitable[None]], ready: asyncio.Event) -> None:
    """Install the trigger, LISTEN, and call ``wake`` on every notice for ``schema``.

    Sets ``ready`` once listening. Raises what connecting or installing raises (the caller
    falls back to polling); reconnects after a dropped connection.
    """
    import psycopg

    while True:
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            await install_trigger(conn, schema)
            await conn.execute(f"LISTEN {CHANNEL}")
            own = schema or (await (await conn.execute("SELECT current_schema()")).fetchone() or ["public"])[0]
            ready.set()
            await wake()  # anything committed before LISTEN took effect
            with contextlib.suppress(psycopg.OperationalError):
                while True:
                    async for notice in conn.notifies(timeout=30.0):
                        if notice.payload == own:
                            await wake()
        log.warning("plait Studio: the LISTEN connection dropped; reconnecting")
        await asyncio.sleep(1.0)
