"""Every backend against plait.testing's checkpointer contract, one test per check per backend;
and the contract itself against deliberately broken backends, so we know it has teeth."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from plait._codec import canonical
from plait._frozen import thaw
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.feed import ChangeFeed
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.memory import MemoryCheckpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Fence, ThreadInfo, WritesBatch
from plait.errors import InvalidIdError
from plait.testing import CHECKS, Check, Factory, Reopen, acheck_checkpointer, check_checkpointer


@dataclass
class Backend:
    factory: Factory
    reopen: Reopen | None


def _memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    async def factory() -> Checkpointer:
        return MemoryCheckpointer()

    yield Backend(factory, None)


def _file(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    counter = itertools.count()

    async def factory() -> Checkpointer:
        cp = FileCheckpointer(tmp_path / f"store{next(counter)}")
        await cp.asetup()
        return cp

    async def reopen(cp: Checkpointer) -> Checkpointer:
        assert isinstance(cp, FileCheckpointer)
        await cp.aclose()
        fresh = FileCheckpointer(cp.folder)
        await fresh.asetup()
        return fresh

    yield Backend(factory, reopen)


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    sqlite = pytest.importorskip("plait.checkpoint.sqlite")
    counter = itertools.count()
    paths: dict[int, str] = {}

    async def open_at(path: str) -> Checkpointer:
        cp: Checkpointer = sqlite.SqliteCheckpointer(path)
        await cp.asetup()
        paths[id(cp)] = path
        return cp

    async def factory() -> Checkpointer:
        return await open_at(str(tmp_path / f"store{next(counter)}.sqlite"))

    async def reopen(cp: Checkpointer) -> Checkpointer:
        await cp.aclose()
        return await open_at(paths.pop(id(cp)))

    yield Backend(factory, reopen)


def _postgres(request: pytest.FixtureRequest, tmp_path: Path, *, on_loop: bool = False) -> Iterator[Backend]:
    postgres = pytest.importorskip("plait.checkpoint.postgres")
    dsn: str = request.getfixturevalue("postgres_dsn")
    import psycopg

    schemas: list[str] = []
    where: dict[int, str] = {}

    async def open_in(schema: str) -> Checkpointer:
        cp: Checkpointer = (_OnLoopPool if on_loop else postgres.PostgresCheckpointer)(dsn, schema=schema)
        await cp.asetup()
        if isinstance(cp, _OnLoopPool):
            await cp.share_a_pool(dsn)
        where[id(cp)] = schema
        return cp

    async def factory() -> Checkpointer:
        schema = f"plait_conf_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'create schema "{schema}"')
        schemas.append(schema)
        return await open_in(schema)

    async def reopen(cp: Checkpointer) -> Checkpointer:
        await cp.aclose()
        return await open_in(where.pop(id(cp)))

    try:
        yield Backend(factory, reopen)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'drop schema if exists "{schema}" cascade')


def _postgres_on_loop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """PostgreSQL with its hot calls on an async pool of the checks' loop, as a worker runs it
    (``use_async_pool``); the sync facade's calls, on loops of their own, take the threads."""
    yield from _postgres(request, tmp_path, on_loop=True)


def _on_loop_class() -> type[Checkpointer]:
    from plait.checkpoint.postgres import PostgresCheckpointer

    class OnLoopPool(PostgresCheckpointer):
        """A PostgresCheckpointer on an async pool of its own loop, closed with it."""

        loop_pool: Any = None

        async def share_a_pool(self, dsn: str) -> None:
            from psycopg_pool import AsyncConnectionPool

            async def autocommit(conn: Any) -> None:
                await conn.set_autocommit(True)

            self.loop_pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False, configure=autocommit)
            await self.loop_pool.open(wait=True)
            self.use_async_pool(self.loop_pool)

        async def aclose(self) -> None:
            await super().aclose()
            if self.loop_pool is not None:
                await self.loop_pool.close()

    return OnLoopPool


try:
    _OnLoopPool: type[Any] = _on_loop_class()  # (Any: its share_a_pool is not the protocol's)
except ImportError:  # no psycopg: the PostgreSQL backends are skipped
    _OnLoopPool = MemoryCheckpointer


BACKENDS = {
    "memory": _memory,
    "file": _file,
    "sqlite": _sqlite,
    "postgres": _postgres,
    "postgres-on-loop": _postgres_on_loop,
}


@pytest.fixture(
    params=[
        "memory",
        "file",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-on-loop", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from BACKENDS[request.param](request, tmp_path)


@pytest.mark.parametrize("check", CHECKS, ids=[c.name for c in CHECKS])
def test_backend_meets_the_contract(backend: Backend, check: Check) -> None:
    if check.needs_reopen and backend.reopen is None:
        pytest.skip("the backend is not durable (no reopen)")
    check_checkpointer(backend.factory, reopen=backend.reopen, checks=[check])


# -- the suite's own API -------------------------------------------------------------------


async def _memory_factory() -> Checkpointer:
    return MemoryCheckpointer()


def test_check_names_are_unique_and_documented() -> None:
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    assert all(c.doc and c.doc != c.name for c in CHECKS)
    assert [c.name for c in CHECKS if c.needs_reopen] == ["durable_after_reopen"]


def test_whole_suite_passes_on_memory_in_one_call() -> None:
    check_checkpointer(_memory_factory)


def test_async_variant_runs_inside_an_event_loop() -> None:
    asyncio.run(acheck_checkpointer(_memory_factory, checks=["root_round_trip", "leases"]))


def test_unknown_check_name_is_refused() -> None:
    with pytest.raises(ValueError, match="no checkpointer check named 'nope'"):
        check_checkpointer(_memory_factory, checks=["nope"])


def test_checks_close_every_checkpointer_they_open() -> None:
    opened: list[_Tracked] = []

    async def factory() -> Checkpointer:
        cp = _Tracked()
        opened.append(cp)
        return cp

    check_checkpointer(factory, checks=["root_round_trip", "namespaces_isolate"])
    assert opened and all(cp.closed for cp in opened)


def test_reopen_check_is_skipped_without_reopen_and_run_with_it() -> None:
    reopened: list[Checkpointer] = []

    async def reopen(cp: Checkpointer) -> Checkpointer:
        reopened.append(cp)
        return cp  # memory "reopens" onto itself: same data, so the check passes

    check_checkpointer(_memory_factory, checks=["durable_after_reopen"])
    assert reopened == []
    check_checkpointer(_memory_factory, reopen=reopen, checks=["durable_after_reopen"])
    assert len(reopened) == 3


class _Tracked(MemoryCheckpointer):
    closed = False

    async def aclose(self) -> None:
        self.closed = True


# -- broken backends: each must fail the check that pins what it breaks --------------------


class _ForgetsUnchanged(MemoryCheckpointer):
    """Stores only the changed channels and forgets to inherit the rest."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        slim = []
        for cw in checkpoints:
            cp = cw.checkpoint
            if cp.parent_id is not None:
                cp = replace(cp, values={k: v for k, v in cp.values.items() if k in cw.changed})
            slim.append(replace(cw, checkpoint=cp))
        await super().acommit(checkpoints=slim, writes=writes, fence=fence, memory=memory)


class _IgnoresFold(MemoryCheckpointer):
    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        await super().acommit(
            checkpoints=[replace(cw, folds_parent_writes=False) for cw in checkpoints], writes=writes, fence=fence
        )


class _AnyoneGetsTheLease(MemoryCheckpointer):
    async def atake_lease(  # type: ignore[override]  # broken on purpose: no lease, and no refusal either
        self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None
    ) -> None:
        return None


class _NotAtomic(MemoryCheckpointer):
    """Encodes and stores checkpoint by checkpoint: a failure leaves the first ones behind."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        for cw in checkpoints:
            canonical(dict(cw.checkpoint.values))
            await super().acommit(checkpoints=[cw], fence=fence, memory=memory)
        for batch in writes:
            canonical([w.to_json() for w in batch.writes])
            await super().acommit(writes=[batch], fence=fence, memory=memory)


class _MutableValues(MemoryCheckpointer):
    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        cp = await super().aget(thread_id, checkpoint_id, namespace=namespace)
        return None if cp is None else replace(cp, values=thaw(cp.values))


class _HistoryByIdOrder(MemoryCheckpointer):
    """Lists every checkpoint by id instead of walking the parents."""

    async def ahistory(self, thread_id: str, **kwargs: Any) -> list[Checkpoint]:
        thread = self._checkpoints.get((kwargs.get("namespace", ""), thread_id), {})
        return [thread[cid] for cid in sorted(thread, reverse=True)][: kwargs.get("limit")]


class _PrunesOneTooFew(MemoryCheckpointer):
    async def aprune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int:
        more = None if keep_last is None else keep_last + 1
        return await super().aprune(
            thread_id, keep_last=more, newer_than=newer_than, namespace=namespace, branches=branches
        )


class _FoldsCase(MemoryCheckpointer):
    """Thread ids compared case-insensitively, like files on a case-insensitive disk."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        await super().acommit(
            checkpoints=[
                replace(cw, checkpoint=replace(cw.checkpoint, thread_id=cw.checkpoint.thread_id.lower()))
                for cw in checkpoints
            ],
            writes=[replace(b, thread_id=b.thread_id.lower()) for b in writes],
            fence=fence,
        )

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        cp = await super().aget(thread_id.lower(), checkpoint_id, namespace=namespace)
        return None if cp is None else replace(cp, thread_id=thread_id)


class _IntegralFloats(MemoryCheckpointer):
    """Round-trips values through a lossy store that writes 1.0 as 1."""

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        cp = await super().aget(thread_id, checkpoint_id, namespace=namespace)
        if cp is None:
            return None
        from plait._codec import freeze

        def lossy(v: Any) -> Any:
            if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
                return int(v)
            if isinstance(v, dict):
                return {k: lossy(x) for k, x in v.items()}
            if isinstance(v, list):
                return [lossy(x) for x in v]
            return v

        return replace(cp, values={k: freeze(lossy(thaw(v)), k) for k, v in cp.values.items()})


class _DeleteKeepsWrites(MemoryCheckpointer):
    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        self._checkpoints.pop((namespace, thread_id), None)


class _IgnoresNoWrites(MemoryCheckpointer):
    """Checks the expected head but not its pending writes."""

    dropped = "expect_no_writes"
    """The fence's condition this store drops before committing."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        if fence is not None:
            dropped: dict[str, Any] = {self.dropped: False}
            fence = replace(fence, **dropped)
        await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)


class _IgnoresParent(_IgnoresNoWrites):
    """Checks the expected head but not the parent a commit builds on."""

    dropped = "expect_parent_no_writes"


class _ReadsBadIdsAsMissing(MemoryCheckpointer):
    """Finds nothing for an id no store can hold, instead of refusing it."""

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        try:
            return await super().aget(thread_id, checkpoint_id, namespace=namespace)
        except InvalidIdError:
            return None


class _StoresAnyRecord(MemoryCheckpointer):
    """Stores every commit as given: pending writes of unknown kinds, tasks of any type."""

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        self._store(checkpoints, writes)


class _CutsCycles(MemoryCheckpointer):
    """Ends a lineage quietly where its parent links loop (as the SQL backends once did)."""

    async def ahistory(self, thread_id: str, **kwargs: Any) -> list[Checkpoint]:
        thread = self._checkpoints.get((kwargs.get("namespace", ""), thread_id), {})
        out: list[Checkpoint] = []
        cursor = max(thread) if thread else None
        while cursor in thread and thread[cursor] not in out:
            out.append(thread[cursor])
            cursor = thread[cursor].parent_id
        return out


class _FencesEachNamespace(MemoryCheckpointer):
    """Checks a subgraph's commit against its own namespace's lease (none: any token passes)."""

    def _check_fence(self, checkpoints: Any, writes: Any, fence: Fence, now: float) -> Any:
        if fence.lease_namespace is not None:
            return {}
        return super()._check_fence(checkpoints, writes, fence, now)


class _TreeOfOneBranch(MemoryCheckpointer):
    """Lists the head's lineage as the thread's tree (a branch left by a fork goes missing)."""

    async def atree(self, thread_id: str, *, namespace: str = "") -> dict[str, str | None]:
        lineage = reversed(await self.ahistory(thread_id, namespace=namespace))
        return {cp.id: cp.parent_id for cp in lineage}


class _OldestThreadFirst(MemoryCheckpointer):
    async def alist_threads(self, *, namespace: str | None = None, **filters: Any) -> list[ThreadInfo]:
        return list(reversed(await super().alist_threads(namespace=namespace, **filters)))


@pytest.mark.parametrize(
    ("broken", "check"),
    [
        (_ForgetsUnchanged, "unchanged_channels_inherit"),
        (_IgnoresFold, "fold_parent_writes"),
        (_AnyoneGetsTheLease, "leases"),
        (_NotAtomic, "failed_commit_leaves_nothing"),
        (_MutableValues, "root_round_trip"),
        (_HistoryByIdOrder, "history_follows_newest_branch"),
        (_PrunesOneTooFew, "prune_keeps_newest_per_branch"),
        (_FoldsCase, "awkward_strings"),
        (_IntegralFloats, "root_round_trip"),
        (_DeleteKeepsWrites, "delete_thread"),
        (_OldestThreadFirst, "list_threads"),
        (_IgnoresNoWrites, "fence_expect_no_writes"),
        (_IgnoresParent, "fence_expect_parent_no_writes"),
        (_FencesEachNamespace, "fence_lease_namespace"),
        (_ReadsBadIdsAsMissing, "invalid_ids_are_refused"),
        (_StoresAnyRecord, "records_of_other_types_are_refused"),
        (_CutsCycles, "parent_cycles_are_reported"),
        (_TreeOfOneBranch, "tree_lists_every_branch"),
    ],
    ids=lambda x: x if isinstance(x, str) else x.__name__,
)
def test_suite_catches_a_broken_backend(broken: type[MemoryCheckpointer], check: str) -> None:
    async def factory() -> Checkpointer:
        return broken()

    with pytest.raises(AssertionError, match=f"check '{check}' failed"):
        check_checkpointer(factory, checks=[check])


class _HearsNothing(MemoryCheckpointer):
    """Hands out a feed of another store."""

    def achanges(self, **options: Any) -> ChangeFeed:
        return MemoryCheckpointer().achanges(**options)


def test_suite_catches_a_feed_that_hears_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from plait.testing import _feed_checks

    monkeypatch.setattr(_feed_checks, "WAIT", 0.5)  # what never comes fails sooner

    async def factory() -> Checkpointer:
        return _HearsNothing()

    with pytest.raises(AssertionError, match="check 'change_feed' failed"):
        check_checkpointer(factory, checks=["change_feed"])
