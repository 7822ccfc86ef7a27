"""The retention policy stored in the database (Checkpointer.set_stored_retention): every
process opening the store sees it, the checkpointer's own ``retention=`` wins over it and a
thread's own policy over both; on PostgreSQL one sweeper at a time (an advisory lock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait import END, START, AppendList, Checkpointer, Graph, Retention, RetentionError, StateSchema
from plait.checkpoint import MemoryCheckpointer, PostgresCheckpointer, SqliteCheckpointer


def _app(cp: Checkpointer) -> Any:
    g = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("n", lambda s: {"log": ["n"]})
    g.add_edge(START, "n").add_edge("n", END)
    return g.compile(cp)


def test_a_stored_policy_is_seen_by_every_checkpointer_of_the_store(make_saver: Callable[..., Checkpointer]) -> None:
    writer = make_saver()
    writer.setup()  # (PostgreSQL: plait db migrate)
    assert writer.get_stored_retention() is None
    policy = Retention(after=60, action="keep_latest", keep_interrupted=False)
    writer.set_stored_retention(policy)
    reader = writer if isinstance(writer, MemoryCheckpointer) else make_saver()
    assert reader.get_stored_retention() == policy
    assert reader.effective_retention() == policy
    writer.set_stored_retention(Retention(after=120))
    assert reader.get_stored_retention() == Retention(after=120), "a new policy replaces the old"
    writer.clear_stored_retention()
    writer.clear_stored_retention()  # clearing nothing is fine
    assert reader.get_stored_retention() is None


def test_the_sweep_applies_the_stored_policy_below_the_checkpointers_and_each_threads(
    make_saver: Callable[..., Checkpointer],
) -> None:
    cp = make_saver()
    app = _app(cp)
    app.invoke({}, thread_id="plain")  # sets the store up
    app.invoke({}, thread_id="own", metadata={"retention": "never"})
    cp.set_stored_retention(Retention(after=60))
    assert cp.sweep(at=cp.store_time() + 30).deleted == ()
    cp.set_retention(Retention(after=86400))  # the code's own policy wins over the stored one
    report = cp.sweep(at=cp.store_time() + 3600)
    assert report.deleted == () and report.policy == Retention(after=86400)
    cp.set_retention(None)
    dry = cp.sweep(dry_run=True, at=cp.store_time() + 3600)
    assert dry.deleted == (("", "plain"),) and dry.dry_run and dry.policy == Retention(after=60)
    report = cp.sweep(at=cp.store_time() + 3600)
    assert report.deleted == (("", "plain"),) and not report.held_elsewhere
    assert [t.thread_id for t in cp.list_threads()] == ["own"]
    assert report.to_json()["policy"] == {"after": 60, "action": "delete", "keep_interrupted": True}


def test_a_stored_value_that_is_not_a_policy_says_how_to_remove_it(tmp_path: Any) -> None:
    cp = SqliteCheckpointer(tmp_path / "p.db")
    try:
        cp.set_stored_retention(Retention(after=5))
        import sqlite3

        conn = sqlite3.connect(tmp_path / "p.db")  # closed here: `with` only commits
        with conn:
            conn.execute("UPDATE plait_retention_policy SET policy = '{\"after\": -1}'")
        conn.close()
        with pytest.raises(RetentionError, match="plait db retention --off"):
            cp.get_stored_retention()
        with pytest.raises(RetentionError, match="is not a Retention"):
            cp.set_stored_retention({"after": 5})  # type: ignore[arg-type]
    finally:
        cp.close()


@pytest.mark.postgres
def test_one_sweeper_at_a_time_on_postgres(postgres_dsn: str, postgres_schema: str) -> None:
    async def go() -> None:
        first = PostgresCheckpointer(postgres_dsn, schema=postgres_schema, retention=Retention(after=60))
        second = PostgresCheckpointer(postgres_dsn, schema=postgres_schema, retention=Retention(after=60))
        other = PostgresCheckpointer(postgres_dsn, schema=None, retention=Retention(after=60))
        try:
            await first.asetup()
            await _app(first).ainvoke({}, thread_id="t")
            later = first.store_time() + 3600
            async with first._sweep_lock() as held:  # the first sweeper's own connection
                assert held
                blocked = await second.asweep(at=later)
                assert blocked.held_elsewhere and blocked.deleted == ()
                assert (await second.asweep(dry_run=True, at=later)).deleted == (("", "t"),), "a dry run needs no lock"
                async with other._sweep_lock() as elsewhere:
                    assert elsewhere, "another schema's sweep takes its own lock"
            done = await second.asweep(at=later)
            assert not done.held_elsewhere and done.deleted == (("", "t"),)
        finally:
            for cp in (first, second, other):
                await cp.aclose()

    asyncio.run(go())
