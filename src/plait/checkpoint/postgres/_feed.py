"""PostgreSQL's change feed: LISTEN/NOTIFY, through a trigger the store adds on first use.

Why a trigger, and not a ``pg_notify`` in plait's commit path: most stores are never
watched, and a commit on them must pay nothing for a feed nobody asked for. The first feed
opened on a schema adds (:func:`install_trigger`, idempotent, in one transaction) a
statement-level trigger on the checkpoints, writes and threads tables that calls
``pg_notify('plait_studio', schema)``. It stays, and every later feed reuses it. From then
on a commit pays one notice per transaction (PostgreSQL folds a transaction's identical
notices into one), delivered to listeners only, dropped when none listen. The names are
those the Studio gave the trigger when it was the only reader, so a store that has it keeps
one trigger, not two.

The notice names the schema only, not the thread: naming threads would need a row-level
trigger (one call per written row) or transition tables on every commit of the schema. The
feed reads which threads changed instead, with one read of the thread rows per burst of
notices on its own connection (:data:`~plait.checkpoint.feed.THREAD_ROWS`), which costs the
listener, not the writers.

A role without the right to create the trigger gets a feed that polls those rows every
``interval`` instead, and a warning in the log saying why. A dropped connection is opened
again; the first look after it reports what changed in between.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from plait.checkpoint.feed import POLL, THREAD_ROWS, ChangeFeed, RowTracker, ThreadChange
from plait.checkpoint.postgres._connect import scrubbed

__all__ = ["CHANNEL", "PgFeed", "install_trigger"]

CHANNEL = "plait_studio"
TABLES = ("checkpoints", "writes", "threads")
RECONNECT = 1.0
"""Seconds before the feed opens its connection again after losing it."""
log = logging.getLogger("plait.checkpoint.postgres")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def install_trigger(conn: Any, schema: str | None) -> None:
    """Create the notify function and triggers of ``schema`` unless they are there."""
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


class PgFeed(ChangeFeed):
    """The changes of the plait tables in ``schema`` (None: the search path's) of the
    database ``conninfo`` names."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str | None,
        connect_timeout: float = 30.0,
        interval: float | None = None,
        namespace: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__(mechanism="postgres listen/notify", namespace=namespace, thread_id=thread_id)
        self._conninfo = conninfo
        self._schema = schema
        self._connect_timeout = connect_timeout
        self.interval: float = POLL if interval is None else interval
        prefix = (_ident(schema) + ".plait_") if schema else "plait_"
        self._rows = THREAD_ROWS.format(P=prefix, since="%s")
        self._tracker = RowTracker()

    async def _changes(self, conn: Any) -> list[ThreadChange]:
        import psycopg

        try:
            rows = await (await conn.execute(self._rows, (self._tracker.since,))).fetchall()
        except psycopg.errors.UndefinedTable:  # not set up yet: no threads
            rows = []
        return self._tracker.look(rows)

    async def _watch(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo,
                    autocommit=True,
                    connect_timeout=max(1, round(self._connect_timeout)),
                    application_name="plait change feed",
                ) as conn:
                    await self._serve(conn)
            except psycopg.OperationalError as exc:
                log.warning(
                    "plait: the change feed lost its PostgreSQL connection (%s); reconnecting",
                    scrubbed(exc, self._conninfo),
                )
            await asyncio.sleep(RECONNECT)

    async def _serve(self, conn: Any) -> None:
        import psycopg

        if self.mechanism != "polling":
            try:
                await install_trigger(conn, self._schema)
                await conn.execute(f"LISTEN {CHANNEL}")
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:  # no right to add the trigger (or to LISTEN): poll instead
                log.warning(
                    "plait: PostgreSQL change notices unavailable (%s); the change feed polls every %.1fs",
                    scrubbed(exc, self._conninfo),
                    self.interval,
                )
                self.mechanism = "polling"
        own = self._schema or (await (await conn.execute("SELECT current_schema()")).fetchone() or ["public"])[0]
        self._emit(await self._changes(conn))  # the first look only records; after a reconnect, the gap
        self.ready.set()
        while True:
            if self.mechanism == "polling":
                await asyncio.sleep(self.interval)
            elif not await self._heard(conn, own):
                continue
            self._emit(await self._changes(conn))

    @staticmethod
    async def _heard(conn: Any, own: str) -> bool:
        """Whether a notice for ``own`` came within a while; the notices queued behind it are
        taken too, since the look that follows covers them."""
        heard = False
        async for notice in conn.notifies(timeout=30.0, stop_after=1):
            heard = heard or notice.payload == own
        if heard:
            async for notice in conn.notifies(timeout=0.01):
                heard = heard or notice.payload == own
        return heard
