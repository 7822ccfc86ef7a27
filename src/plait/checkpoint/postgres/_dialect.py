"""PostgreSQL's dialect of plait's SQL: how names are quoted, the column types, the clock,
and the statements that differ from SQLite's (see :class:`~plait.checkpoint.sql._base.Dialect`)."""

from __future__ import annotations

from plait.checkpoint.postgres._schema import PG_MIGRATIONS, SWEEP_BATCH
from plait.checkpoint.sql._base import Dialect

__all__ = ["pg_dialect", "quote_ident"]


def quote_ident(name: str) -> str:
    if not name or "\x00" in name:
        raise ValueError(f"invalid Postgres schema name {name!r}")
    return '"' + name.replace('"', '""') + '"'


def pg_dialect(schema: str | None) -> Dialect:
    """The dialect of a store in ``schema`` (None: the connection's search path)."""
    return Dialect(
        prefix=(quote_ident(schema) + ".plait_") if schema else "plait_",
        placeholder="%s",
        blob="BYTEA",
        real="DOUBLE PRECISION",
        serial_pk="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        now="extract(epoch from clock_timestamp())::float8",
        clock="coalesce(?::float8, extract(epoch from clock_timestamp())::float8)",
        no_limit=None,
        keys="SELECT k.channel, k.id FROM unnest(?::text[], ?::text[]) AS k (channel, id)",
        keys_params=lambda keys: [[k[0] for k in keys], [k[1] for k in keys]],
        batch=SWEEP_BATCH,
        table_exists="SELECT to_regclass(?)::text",
        table_exists_param=lambda name: name,
        text_holds_nul=False,
        lateral=True,
        migrations=PG_MIGRATIONS,
        server_checks=True,
        jsonb=True,
        row_lock=" FOR UPDATE",
    )
