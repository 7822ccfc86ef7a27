"""A step's commit that folds its parent's pending writes, against a real PostgreSQL: it is
sent as one prepared call (the ``DELETE`` riding on ``put_checkpoint()``), and it does what
the statements one by one did: the new checkpoint lands, the parent's writes are gone, and a
commit refused by its fence deletes nothing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from plait import END, START, AppendList, Graph, NodeError, StateSchema

pytestmark = pytest.mark.postgres
psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("plait.checkpoint.postgres")
from plait.checkpoint.postgres._send import Fusion  # noqa: E402  (after the skip: needs psycopg's extra)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQL of every commit the fusion turned into one call."""
    calls: list[str] = []
    fuse = Fusion.fuse

    def spy(self: Fusion, statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[str, Sequence[Any]] | None:
        fused = fuse(self, statements)
        if fused is not None:
            calls.append(fused[0])
        return fused

    monkeypatch.setattr(Fusion, "fuse", spy)
    yield calls


def chain(calls: dict[str, int]) -> Graph:
    """a -> b -> c, where b fails on its first call."""
    graph = Graph(StateSchema.builder().add("log", AppendList()).build())

    def node(name: str) -> Any:
        def run(state: Any) -> dict[str, list[str]]:
            calls[name] = calls.get(name, 0) + 1
            if name == "b" and calls[name] == 1:
                raise RuntimeError("b fails once")
            return {"log": [name]}

        return run

    for name in "abc":
        graph.add_node(name, node(name))
    graph.add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    return graph


def pending_rows(dsn: str, schema: str, checkpoint_id: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema}".plait_writes WHERE thread_id = %s AND checkpoint_id = %s',
            ("t", checkpoint_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_resume_folds_the_failed_steps_writes_in_one_call(
    postgres_dsn: str, postgres_schema: str, sent: list[str]
) -> None:
    cp = postgres.PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
    try:
        cp.migrate()
        calls: dict[str, int] = {}
        app = chain(calls).compile(checkpointer=cp)
        with pytest.raises(NodeError):
            app.invoke({"log": []}, thread_id="t", durability="sync")
        failed = app.get_state("t")
        assert failed.next == ("b",)
        failed_id = failed.checkpoint_id
        assert failed_id is not None
        assert pending_rows(postgres_dsn, postgres_schema, failed_id) == 1  # b's error
        sent.clear()

        assert app.invoke(None, thread_id="t", durability="sync") == {"log": ["a", "b", "c"]}

        assert calls == {"a": 1, "b": 2, "c": 1}
        assert any(sql.startswith("WITH folded AS (DELETE FROM") for sql in sent), sent
        assert pending_rows(postgres_dsn, postgres_schema, failed_id) == 0
        history = [s.checkpoint_id for s in app.get_state_history("t")]
        assert failed_id in history  # the parent stays; only its pending writes went
        assert app.get_state("t").values == {"log": ["a", "b", "c"]}
    finally:
        cp.close()


def test_a_folding_commit_refused_by_its_fence_deletes_nothing(
    postgres_dsn: str, postgres_schema: str, sent: list[str]
) -> None:
    """A run whose lease was taken over must not delete the writes it would have folded."""
    from plait.checkpoint.model import CheckpointWrite, Fence, PendingWrite, WritesBatch
    from plait.errors import LeaseLostError

    from .._backend_helpers import make

    cp = postgres.PostgresCheckpointer(postgres_dsn, schema=postgres_schema)
    try:
        cp.migrate()
        root = make("t", None, {"n": 1})
        cp.commit(checkpoints=[root])
        lease = cp.take_lease("t", "run-1", ttl=60.0)
        write = PendingWrite(task_id="a", kind="result", value={"writes": [["n", 2]]})
        fence = Fence(owner="run-1", token=lease.token)
        cp.commit(writes=[WritesBatch(thread_id="t", checkpoint_id=root.checkpoint.id, writes=(write,))], fence=fence)
        cp.release_lease(lease)
        cp.take_lease("t", "run-2", ttl=60.0)  # run-1's lease is gone: its token is stale
        sent.clear()

        child = make("t", root.checkpoint, {"n": 2}, folds=True)
        assert isinstance(child, CheckpointWrite) and child.folds_parent_writes
        with pytest.raises(LeaseLostError):
            cp.commit(checkpoints=[child], fence=fence)

        assert any(sql.startswith("WITH folded AS") for sql in sent), sent
        assert pending_rows(postgres_dsn, postgres_schema, root.checkpoint.id) == 1
        head = cp.get("t")
        assert head is not None and head.id == root.checkpoint.id
    finally:
        cp.close()
