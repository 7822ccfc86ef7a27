"""A caller's statement riding on a lease's (``PostgresCheckpointer.lease_riders``, what a
``plait worker`` records where a run starts with): it commits with the lease and sees the
checkpoint the lease read, on the loop's pool and on the query threads alike, and never
without the lease; the caller learns once whether it rode."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from plait.checkpoint.model import Fence
from plait.checkpoint.postgres._riders import KEPT, LeaseRiders
from plait.errors import ThreadBusyError

from .._backend_helpers import make
from .test_pg_loop import _on_loop

pytestmark = pytest.mark.postgres


def _noted(dsn: str, schema: str) -> list[tuple[str, str | None]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [(r[0], r[1]) for r in conn.execute(f'SELECT who, head FROM "{schema}".noted ORDER BY who').fetchall()]


def _rider(schema: str, who: str) -> tuple[str, list[Any]]:
    return (f'INSERT INTO "{schema}".noted (who, head) SELECT %s, (SELECT id FROM l LIMIT 1)', [who])


def _table(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".noted (who text PRIMARY KEY, head text)')


@pytest.mark.parametrize("on_loop", [True, False], ids=["loop", "threads"])
def test_a_rider_commits_with_its_lease_and_reads_the_head(
    postgres_dsn: str, postgres_schema: str, on_loop: bool
) -> None:
    _table(postgres_dsn, postgres_schema)

    async def go(cp: Any, pool: Any) -> None:
        cp.lease_riders.add("t", "", "first", _rider(postgres_schema, "first"))
        lease, head = await cp.atake_lease_and_get("t", "first")
        assert head is None and cp.lease_riders.took("t", "", "first")
        assert not cp.lease_riders.took("t", "", "first")  # told once
        first = make("t", None, {"n": 1})
        await cp.acommit(checkpoints=[first], fence=Fence(owner="first", token=lease.token, release=True))
        # another owner's rider waits for that owner's lease: a lease of someone else leaves it
        cp.lease_riders.add("t", "", "second", _rider(postgres_schema, "second"))
        lease, _ = await cp.atake_lease_and_get("t", "other")
        assert not cp.lease_riders.took("t", "", "other")
        await cp.arelease_lease(lease)
        if on_loop:
            lease, head = await cp.atake_lease_and_get("t", "second")
        else:  # the thread path (a call from another loop) carries it too
            lease, head = await asyncio.to_thread(lambda: cp.take_lease_and_get("t", "second"))
        assert head is not None and head.id == first.checkpoint.id
        assert cp.lease_riders.took("t", "", "second")
        assert _noted(postgres_dsn, postgres_schema) == [("first", None), ("second", first.checkpoint.id)]

    _on_loop(postgres_dsn, postgres_schema, go)


def test_a_rider_of_a_lease_refused_is_not_stored(postgres_dsn: str, postgres_schema: str) -> None:
    _table(postgres_dsn, postgres_schema)

    async def go(cp: Any, pool: Any) -> None:
        await cp.atake_lease("t", "holder")
        cp.lease_riders.add("t", "", "late", _rider(postgres_schema, "late"))
        with pytest.raises(ThreadBusyError):
            await cp.atake_lease_and_get("t", "late")
        assert not cp.lease_riders.took("t", "", "late")
        assert _noted(postgres_dsn, postgres_schema) == []

    _on_loop(postgres_dsn, postgres_schema, go)


def test_riders_kept_are_bounded_the_oldest_dropped() -> None:
    riders = LeaseRiders()
    for i in range(KEPT + 1):
        riders.add(f"t{i}", "", "o", ("UPDATE x SET y = 1", []))
    assert riders.waiting(("", "t0", "o")) is None
    assert riders.waiting(("", f"t{KEPT}", "o")) is not None
