"""Checks that a store refuses what it could not hold back, and reports what it cannot read
instead of looping on it: ids outside the id rule, records of the wrong types, parent cycles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import CheckpointWrite, Lease, PendingWrite, Task, WritesBatch, new_checkpoint_id
from plait.errors import MAX_ID_BYTES, CheckpointCorruptError, InvalidIdError, InvalidRecordError, PlaitError
from plait.testing._harness import Checks, Env, ThreadBuilder, all_read_back, expect, fail, make_writes, same_history
from plait.testing._robustness_checks import NOISE

check = Checks()

BAD_IDS: tuple[tuple[str, Any], ...] = (
    ("a lone surrogate", "\ud800"),
    ("a lone surrogate inside text", "ab\udfffcd"),
    ("a NUL", "a\x00b"),
    ("one byte too many", "x" * (MAX_ID_BYTES + 1)),
    ("one byte too many in UTF-8", "\u00e9" * (MAX_ID_BYTES // 2) + "x"),
    ("bytes", b"thread"),
    ("an int", 7),
)
"""Ids that break the id rule, each with what is wrong with it."""

_BOUND = 20.0
"""Seconds a read of damaged data may take before the check calls it a hang."""


async def _bounded(what: str, call: Awaitable[Any]) -> Any:
    """``await call``, failing the check if it does not return in :data:`_BOUND` seconds (a
    backend that loops in a worker thread is caught; one that loops on the event loop itself
    cannot be, and is left to the test runner's timeout)."""
    try:
        return await asyncio.wait_for(call, _BOUND)
    except TimeoutError:
        fail(f"{what} did not return within {_BOUND:g}s")


async def _refused(what: str, call: Callable[[], Awaitable[Any]], error: type[Exception], bad: Any = None) -> None:
    """``call()`` raises ``error`` (a ValueError too); an InvalidIdError names ``bad``."""
    try:
        await call()
    except error as exc:
        expect(isinstance(exc, ValueError), f"{what}: {error.__name__} is not a ValueError")
        if isinstance(exc, InvalidIdError):
            expect(exc.value == bad, f"{what}: InvalidIdError names {exc.value!r}, not the id given ({bad!r})")
    except Exception as exc:
        fail(f"{what} raised {type(exc).__name__} ({exc}), expected {error.__name__}")
    else:
        fail(f"{what} was not refused with {error.__name__}")


@check("invalid_ids_are_refused")
async def _invalid_ids(env: Env) -> None:
    """Ids that are not UTF-8 text, hold NUL, are too long or are not str are refused by every call."""
    cp = await env.new()
    good = ThreadBuilder("good")
    base = good.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[base])
    for why, bad in BAD_IDS:
        calls = _calls_naming(cp, bad, base)
        for name, call in calls:
            await _refused(f"{name} with {why}", call, InvalidIdError, bad)
    listed = [(t.namespace, t.thread_id) for t in await cp.alist_threads()]
    expect(listed == [("", "good")], f"refused calls left threads behind: {listed!r}")
    await all_read_back("after the refused calls", cp, good)
    await cp.arelease_lease(await cp.atake_lease("good", "owner"))  # nothing above took or broke a lease


def _calls_naming(cp: Checkpointer, bad: Any, base: CheckpointWrite) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """Every protocol call, each naming ``bad`` as one of its ids."""
    good = base.checkpoint

    def as_thread(**fields: Any) -> CheckpointWrite:
        return replace(base, checkpoint=replace(good, **({"id": new_checkpoint_id(), "parent_id": None} | fields)))

    one = make_writes(("task", "effect", "k", 1))
    return [
        ("commit() of a checkpoint with that thread id", lambda: cp.acommit(checkpoints=[as_thread(thread_id=bad)])),
        ("commit() of a checkpoint with that namespace", lambda: cp.acommit(checkpoints=[as_thread(namespace=bad)])),
        ("commit() of a checkpoint with that id", lambda: cp.acommit(checkpoints=[as_thread(id=bad)])),
        ("commit() of a checkpoint with that parent id", lambda: cp.acommit(checkpoints=[as_thread(parent_id=bad)])),
        (
            "commit() of pending writes on that thread id",
            lambda: cp.acommit(writes=[WritesBatch(thread_id=bad, checkpoint_id=good.id, writes=one)]),
        ),
        (
            "commit() of pending writes in that namespace",
            lambda: cp.acommit(writes=[WritesBatch(thread_id="good", namespace=bad, checkpoint_id="x", writes=one)]),
        ),
        (
            "commit() of pending writes on that checkpoint id",
            lambda: cp.acommit(writes=[WritesBatch(thread_id="good", checkpoint_id=bad, writes=one)]),
        ),
        ("get() of that thread id", lambda: cp.aget(bad)),
        ("get() in that namespace", lambda: cp.aget("good", namespace=bad)),
        ("get() of that checkpoint id", lambda: cp.aget("good", bad)),
        ("history() of that thread id", lambda: cp.ahistory(bad)),
        ("history() in that namespace", lambda: cp.ahistory("good", namespace=bad)),
        ("history(before=...) that id", lambda: cp.ahistory("good", before=bad)),
        ("list_threads() of that namespace", lambda: cp.alist_threads(namespace=bad)),
        ("delete_thread() of that thread id", lambda: cp.adelete_thread(bad)),
        ("delete_thread() in that namespace", lambda: cp.adelete_thread("good", namespace=bad)),
        ("prune() of that thread id", lambda: cp.aprune(bad, keep_last=1)),
        ("take_lease() of that thread id", lambda: cp.atake_lease(bad, "owner")),
        ("take_lease() in that namespace", lambda: cp.atake_lease("good", "owner", namespace=bad)),
        ("renew_lease() of a lease on that thread id", lambda: cp.arenew_lease(_lease_on(bad))),
        ("release_lease() of a lease on that thread id", lambda: cp.arelease_lease(_lease_on(bad))),
        ("get_thread() of that thread id", lambda: cp.aget_thread(bad)),
        ("take_lease_and_get() of that thread id", lambda: cp.atake_lease_and_get(bad, "owner")),
        ("take_lease_and_get() of that checkpoint id", lambda: cp.atake_lease_and_get("good", "other", bad)),
    ]


def _lease_on(thread_id: Any) -> Lease:
    return Lease(thread_id=thread_id, owner="owner", token=1, taken_at=0.0, expires_at=0.0)


@check("longest_ids_round_trip")
async def _longest_ids(env: Env) -> None:
    """A namespace and a thread id each as long as allowed, and incompressible, work everywhere."""
    cp = await env.new()
    th = ThreadBuilder(NOISE, NOISE[::-1])
    await cp.acommit(checkpoints=[th.step({"a": [1]}, root=True)])
    head = th.step({"a": [1, 2]})
    await cp.acommit(checkpoints=[head])
    writes = make_writes((NOISE[:200], "effect", NOISE[200:400], 1))
    batch = WritesBatch(thread_id=th.thread_id, namespace=th.namespace, checkpoint_id=head.checkpoint.id, writes=writes)
    await cp.acommit(writes=[batch])
    await all_read_back("the longest ids", cp, th)
    await same_history("the longest ids", cp, th)
    await cp.arelease_lease(await cp.atake_lease(th.thread_id, "owner", namespace=th.namespace))
    lease, got = await cp.atake_lease_and_get(th.thread_id, "owner", namespace=th.namespace)
    expect(got is not None and got.id == head.checkpoint.id, "take_lease_and_get() of the longest ids missed the head")
    await cp.arelease_lease(lease)
    listed = [(t.namespace, t.thread_id) for t in await cp.alist_threads(namespace=th.namespace)]
    expect(listed == [(th.namespace, th.thread_id)], "list_threads() of the longest namespace missed its thread")
    await cp.adelete_thread(th.thread_id, namespace=th.namespace)
    expect(await cp.aget(th.thread_id, namespace=th.namespace) is None, "delete_thread() of the longest ids failed")


@check("records_of_other_types_are_refused")
async def _record_types(env: Env) -> None:
    """A pending write of an unknown kind, or a task, version or metadata of another type, is refused."""
    cp = await env.new()
    th = ThreadBuilder("t")
    base = th.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[base])
    cid = base.checkpoint.id
    bad_writes: list[tuple[str, PendingWrite]] = [
        ("of an unknown kind", PendingWrite(task_id="task", kind="finished", key="", value=1)),  # type: ignore[arg-type]
        ("with an int task id", PendingWrite(task_id=7, kind="result", key="", value=1)),  # type: ignore[arg-type]
        ("with a None key", PendingWrite(task_id="task", kind="effect", key=None, value=1)),  # type: ignore[arg-type]
    ]
    for what, w in bad_writes:
        batch = WritesBatch(thread_id="t", checkpoint_id=cid, writes=(w,))
        await _refused(f"commit() of a pending write {what}", partial(cp.acommit, writes=[batch]), InvalidRecordError)
    got = await cp.aget("t")
    expect(got is not None and got.pending_writes == (), "a refused pending write was stored")
    child = th.step({"a": 2})
    bad_checkpoints: list[tuple[str, CheckpointWrite]] = [
        ("a task with an int id", _with(child, next_tasks=(Task(id=5, node="n"),))),  # type: ignore[arg-type]
        ("a task with a None node", _with(child, next_tasks=(Task(id="x", node=None),))),  # type: ignore[arg-type]
        ("a version that is a str", _with(child, versions={"a": "2"})),
        ("a version that is a bool", _with(child, versions={"a": True})),
        ("a barrier of ints", _with(child, barriers={"join": (1, 2)})),
        ("a step that is a float", _with(child, step=1.0)),
        ("metadata 'reducers' that is a list", _with(child, metadata={"reducers": ["a"]})),
        ("metadata 'writes' of strings", _with(child, metadata={"writes": {"node": "a"}})),
        ("metadata 'source' that is an int", _with(child, metadata={"source": 1})),
    ]
    for what, cw in bad_checkpoints:
        commit = partial(cp.acommit, checkpoints=[cw])
        await _refused(f"commit() of a checkpoint with {what}", commit, InvalidRecordError)
        expect(await cp.aget("t", cw.checkpoint.id) is None, f"a refused checkpoint with {what} was stored")
    await cp.acommit(checkpoints=[child], writes=[WritesBatch(thread_id="t", checkpoint_id=cid, writes=make_writes())])
    await all_read_back("after the refused records", cp, th)


def _with(cw: CheckpointWrite, **fields: Any) -> CheckpointWrite:
    return replace(cw, checkpoint=replace(cw.checkpoint, id=new_checkpoint_id(cw.checkpoint.id), **fields))


@check("parent_cycles_are_reported")
async def _cycles(env: Env) -> None:
    """A lineage whose parent links loop is reported as corrupt by history(), never walked forever."""
    cp = await env.new()
    fine = ThreadBuilder("fine")
    await cp.acommit(checkpoints=[fine.step({"a": 1}, root=True), fine.step({"a": 2})])
    loop = ThreadBuilder("loop")
    root = loop.step({"a": [1]}, root=True)
    first = loop.step({"a": [1, 2]})
    second = loop.step({"a": [1, 2, 3]})
    # The root names the newest as its parent: head -> first -> root -> head -> ...
    looped = replace(root, checkpoint=replace(root.checkpoint, parent_id=second.checkpoint.id))
    selfish = ThreadBuilder("self").step({"a": 1}, root=True)
    selfish = replace(selfish, checkpoint=replace(selfish.checkpoint, parent_id=selfish.checkpoint.id))
    try:
        await cp.acommit(checkpoints=[looped, first, second])
        await cp.acommit(checkpoints=[selfish])
    except PlaitError:
        return  # a store may refuse to store a cycle at all; then there is nothing to read
    members = {c.checkpoint.id for c in (root, first, second)}
    reads: list[tuple[str, str, set[str], Callable[[], Awaitable[Any]]]] = [
        ("history()", "loop", members, lambda: cp.ahistory("loop")),
        ("history(filter=...)", "loop", members, lambda: cp.ahistory("loop", filter={"source": "nothing"})),
        ("history(limit=10)", "loop", members, lambda: cp.ahistory("loop", limit=10)),
        ("history(before=...)", "loop", members, lambda: cp.ahistory("loop", before=second.checkpoint.id)),
        ("history() of its own parent", "self", {selfish.checkpoint.id}, lambda: cp.ahistory("self")),
    ]
    for what, tid, ids, call in reads:
        try:
            await _bounded(f"{what} of a lineage with a parent cycle", call())
        except CheckpointCorruptError as exc:
            expect(exc.thread_id == tid, f"{what}: the error names thread {exc.thread_id!r}, not {tid!r}")
            expect(exc.checkpoint_id in ids, f"{what}: the error names {exc.checkpoint_id!r}, not one of the cycle")
        else:
            fail(f"{what} of a lineage with a parent cycle returned instead of raising CheckpointCorruptError")
    short = await _bounded("history(limit=2) of a lineage with a cycle", cp.ahistory("loop", limit=2))
    expect(
        [c.id for c in short] == [second.checkpoint.id, first.checkpoint.id],
        "history(limit=2) stopped short of the cycle and must return what it walked",
    )
    for c in (root, first, second):
        got = await _bounded("get() of a checkpoint in a cycle", cp.aget("loop", c.checkpoint.id))
        expect(got is not None and got.values == c.checkpoint.values, f"get({c.checkpoint.id}) in a cycle misread")
    await same_history("a thread beside the damaged one", cp, fine)
