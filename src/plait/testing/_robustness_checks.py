"""Checks that a store holds up: hostile ids and NUL characters, concurrent calls, ``setup()``
run again, and durability across reopening the storage.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plait.checkpoint.model import WritesBatch
from plait.errors import MAX_ID_BYTES, InvalidIdError, PlaitError, ThreadBusyError
from plait.testing._data_checks import SAMPLE
from plait.testing._harness import (
    Checks,
    Env,
    ThreadBuilder,
    all_read_back,
    busy,
    expect,
    fail,
    make_writes,
    same,
    same_checkpoint,
    same_history,
    same_writes,
)

NOISE = "".join(hashlib.blake2b(bytes([i])).hexdigest() for i in range(MAX_ID_BYTES // 128))
"""Hex digits of hash output, as many as an id may hold: an id that compression cannot shrink."""

AWKWARD: tuple[str, ...] = (
    "it's",
    'say "hi"',
    "a;b; DROP TABLE checkpoints;--",
    "../../etc/passwd",
    "/abs/path",
    "a/b\\c",
    "..",
    ".",
    "",
    " ",
    "\n\t",
    "%2F..%2F",
    "CON",
    "nul.txt",
    "Case",
    "case",
    "CASE",
    "\u00fcn\u00efc\u00f8d\u00e9 \u2713 \U0001f9f5",
    NOISE,
    "x" * MAX_ID_BYTES,
    "x" * (MAX_ID_BYTES - 1) + "y",
    "\u00e9" * (MAX_ID_BYTES // 2),
)
"""Thread ids (and namespaces) that have broken stores: quotes, SQL, paths, case, and the
longest ids allowed (:data:`~plait.errors.MAX_ID_BYTES` bytes of UTF-8, in ASCII, in
two-byte characters, and in hex digits that no compression shrinks)."""


check = Checks()


@check("awkward_strings")
async def _awkward(env: Env) -> None:
    """Ids, namespaces and metadata with quotes, paths, unicode and the longest ids allowed round-trip."""
    cp = await env.new()
    threads: list[ThreadBuilder] = []
    for i, awkward in enumerate(AWKWARD):
        ns = AWKWARD[(i * 7 + 3) % len(AWKWARD)] if i % 3 == 0 else ""
        tid = awkward
        if not awkward.strip():  # refused as a thread id (see blank_thread_ids): a namespace here
            tid, ns = f"blank-{i}", awkward
        th = ThreadBuilder(tid, ns)
        threads.append(th)
        meta = {"label": tid, "quote": "'\";--", tid[:100] or "k": "v" * 10_000}
        await cp.acommit(checkpoints=[th.step({"id": tid, tid[:50] or "e": [i]}, root=True, metadata=meta)])
        await cp.acommit(checkpoints=[th.step({"id": tid + "!"}, metadata=meta)])
        batch = WritesBatch(
            thread_id=tid, namespace=ns, checkpoint_id=th.lineage()[0].id, writes=make_writes((tid, "effect", tid, tid))
        )
        await cp.acommit(writes=[batch])
    for th in threads:
        what = f"thread {th.thread_id[:40]!r} (namespace {th.namespace[:40]!r})"
        await all_read_back(what, cp, th)
        await same_history(what, cp, th)
        got = await cp.aget(th.thread_id, namespace=th.namespace)
        assert got is not None
        same_writes(what, got.pending_writes, make_writes((th.thread_id, "effect", th.thread_id, th.thread_id)))
    listed = sorted((t.namespace, t.thread_id, t.checkpoints) for t in await cp.alist_threads())
    same("list_threads() of awkward ids", listed, sorted((t.namespace, t.thread_id, 2) for t in threads))
    victim = threads[3]  # "../../etc/passwd"
    await cp.adelete_thread(victim.thread_id, namespace=victim.namespace)
    expect(len(await cp.alist_threads()) == len(threads) - 1, "deleting one awkward thread removed others")
    for th in threads[4:]:
        await all_read_back(f"after deleting {victim.thread_id!r}", cp, th)
    await cp.atake_lease(AWKWARD[-3], "owner 'with' \"quotes\"")
    try:
        await cp.atake_lease(AWKWARD[-3], "other")
    except ThreadBusyError as exc:
        busy(exc, AWKWARD[-3], "owner 'with' \"quotes\"", cp.lease_ttl)
    else:
        fail("a lease on a thread id of the longest length allowed was not held")


@check("blank_thread_ids")
async def _blank(env: Env) -> None:
    """An empty or whitespace-only thread id is refused (InvalidIdError) by a commit, a lease
    and a read: stored, no URL, command line or listing could reach it again."""
    cp = await env.new()
    for tid in ("", " ", "\t\n"):
        try:
            await cp.acommit(checkpoints=[ThreadBuilder(tid).step({"v": 1}, root=True)])
        except InvalidIdError:
            pass
        else:
            fail(f"a commit on thread id {tid!r} was not refused with InvalidIdError")
        for call in (cp.atake_lease(tid, "owner"), cp.aget(tid)):
            try:
                await call
            except InvalidIdError:
                pass
            else:
                fail(f"a call naming thread id {tid!r} was not refused with InvalidIdError")
    expect(await cp.alist_threads() == [], "a refused blank thread id left a thread behind")


@check("nul_characters")
async def _nul(env: Env) -> None:
    """A NUL in an id or namespace is refused (InvalidIdError); in metadata or a value it round-trips."""
    cp = await env.new()
    for what, tid, ns in (("thread id", "a\x00b", ""), ("namespace", "t1", "n\x00s")):
        cw = ThreadBuilder(tid, ns).step({"v": 1}, root=True)
        try:
            await cp.acommit(checkpoints=[cw])
        except InvalidIdError:
            pass
        else:
            fail(f"a commit with a NUL in its {what} was not refused with InvalidIdError")
    cases: list[tuple[str, str, Mapping[str, Any], Mapping[str, Any]]] = [
        ("metadata", "t2", {"label": "x\x00y"}, {"v": 1}),
        ("channel value", "t3", {}, {"v": "x\x00y", "w": ["\x00"]}),
    ]
    for what, tid, meta, values in cases:
        cw = ThreadBuilder(tid).step(values, root=True, metadata=meta)
        await cp.acommit(checkpoints=[cw])
        same_checkpoint(f"a NUL in a {what}", await cp.aget(tid), cw.checkpoint)
    th = ThreadBuilder("t4")
    cw = th.step({"a\x00b": 1}, root=True)
    try:
        await cp.acommit(checkpoints=[cw])
    except PlaitError:  # a store may refuse NUL in channel names (SQLite's JSON functions cut at it)
        expect(await cp.aget("t4") is None, "a NUL in a channel name was refused but partly stored")
    else:
        same_checkpoint("a NUL in a channel name", await cp.aget("t4"), cw.checkpoint)
    listed = sorted(t.thread_id for t in await cp.alist_threads())
    expect("a\x00b" not in listed and "t1" not in listed, f"a refused commit left a thread behind: {listed!r}")
    fine = ThreadBuilder("after-nul")
    cw = fine.step({"v": 1}, root=True)
    await cp.acommit(checkpoints=[cw])
    same_checkpoint("a commit after the NUL cases", await cp.aget("after-nul"), cw.checkpoint)


@check("concurrent_calls")
async def _concurrent(env: Env) -> None:
    """Concurrent commits and reads from several tasks on one instance all land intact."""
    cp = await env.new()
    threads = [ThreadBuilder(f"c{i}") for i in range(6)]

    async def run(th: ThreadBuilder) -> None:
        await cp.acommit(checkpoints=[th.step({"log": [], "who": th.thread_id}, root=True)])
        for j in range(6):
            head = th.head
            assert head is not None
            await cp.acommit(checkpoints=[th.step({"log": [*head.values["log"], j]})])
            await cp.aget(th.thread_id)
            await cp.alist_threads()

    await asyncio.gather(*(run(th) for th in threads))
    for th in threads:
        await all_read_back(f"thread {th.thread_id} written concurrently", cp, th)
    expect(len(await cp.alist_threads()) == len(threads), "list_threads() lost a concurrently written thread")


@check("setup_is_idempotent")
async def _setup_twice(env: Env) -> None:
    """setup() on a store that is set up and holds data is safe and keeps the data."""
    cp = await env.new()
    th = ThreadBuilder("t")
    await cp.acommit(checkpoints=[th.step({"a": [1]}, root=True), th.step({"a": [1, 2]})])
    await cp.asetup()
    await cp.asetup()
    await all_read_back("after setup() again", cp, th)


@check("durable_after_reopen", needs_reopen=True)
async def _durable(env: Env) -> None:
    """Everything committed reads back from a new instance over the same storage."""
    cp = await env.new()
    main, other = ThreadBuilder("main"), ThreadBuilder("main", "ns")
    await cp.acommit(checkpoints=[main.step(SAMPLE, root=True, source="input")])
    for i in range(12):
        head = main.head
        assert head is not None
        await cp.acommit(checkpoints=[main.step({"messages": [*head.values["messages"], {"id": f"m{i}"}], "count": i})])
    branch = main.step({"text": "branch"}, parent=main.lineage()[5], source="fork")
    await cp.acommit(checkpoints=[branch, other.step({"x": 1}, root=True)])
    pending = make_writes(
        ("t", "result", "", {"writes": [["count", 1]], "routes": []}), ("t", "effect", "pay", {"ok": True})
    )
    await cp.acommit(writes=[WritesBatch(thread_id="main", checkpoint_id=branch.checkpoint.id, writes=pending)])
    await cp.atake_lease("main", "holder", ttl=60)
    listed = await cp.alist_threads()

    cp = await env.reopen(cp)
    await all_read_back("after reopen", cp, main)
    await all_read_back("after reopen (namespace 'ns')", cp, other)
    await same_history("after reopen", cp, main)
    got = await cp.aget("main")
    assert got is not None
    same_writes("after reopen", got.pending_writes, pending)
    same("list_threads() after reopen", await cp.alist_threads(), listed)
    try:
        await cp.atake_lease("main", "intruder")
    except ThreadBusyError as exc:
        busy(exc, "main", "holder", 60)
    else:
        fail("a lease did not survive reopening the store")
    more = main.step({"count": 100}, fold=True)
    await cp.acommit(checkpoints=[more])
    cp = await env.reopen(cp)
    await all_read_back("after a second reopen", cp, main)
    await cp.aprune("main", keep_last=2)
    cp = await env.reopen(cp)
    for want in main.lineage()[:2]:
        got = await cp.aget("main", want.id)
        expect(got is not None, f"checkpoint {want.id} kept by prune is gone after reopen")
        assert got is not None
        same_checkpoint("after prune and reopen", replace(got, parent_id=want.parent_id), want)
