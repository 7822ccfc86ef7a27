"""Checks of whole threads: listing them, namespaces, deleting and pruning (by age and back to a checkpoint)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from plait.checkpoint.model import CheckpointWrite, Fence, Task, ThreadInfo, WritesBatch
from plait.errors import CheckpointNotFoundError, LeaseLostError
from plait.testing._harness import (
    Checks,
    Env,
    ThreadBuilder,
    all_read_back,
    expect,
    fail,
    make_writes,
    same,
    same_checkpoint,
    same_history,
    same_writes,
)

check = Checks()


@check("list_threads")
async def _list_threads(env: Env) -> None:
    """list_threads(): namespaces apart, counts, heads, newest head first; None lists all."""
    cp = await env.new()
    layout = [("", "t1", 3), ("ns1", "t1", 1), ("ns1", "t2", 2), ("", "t2", 1), ("ns2", "x", 2)]
    threads: dict[tuple[str, str], ThreadBuilder] = {}
    for ns, tid, n in layout:
        th = threads[(ns, tid)] = ThreadBuilder(tid, ns)
        await cp.acommit(checkpoints=[th.step({"i": 0}, root=True, source="input")])
        for i in range(1, n):
            await cp.acommit(checkpoints=[th.step({"i": i})])
    late = threads[("", "t1")]
    await cp.acommit(checkpoints=[late.step({"i": 99}, source="update")])  # now the newest head

    def expected(ns: str | None) -> list[tuple[Any, ...]]:
        rows = []
        for (tns, tid), th in threads.items():
            if ns is None or tns == ns:
                head = th.head
                assert head is not None
                rows.append((head.id, tid, tns, head.step, head.created_at, head.metadata["source"], len(th.by_id)))
        return sorted(rows, reverse=True)

    def as_rows(infos: list[ThreadInfo]) -> list[tuple[Any, ...]]:
        for info in infos:
            expect(isinstance(info, ThreadInfo), f"list_threads() returned a {type(info).__name__}")
        return [(i.head_id, i.thread_id, i.namespace, i.step, i.created_at, i.source, i.checkpoints) for i in infos]

    same("list_threads()", as_rows(await cp.alist_threads()), expected(None))
    for ns in ("", "ns1", "ns2", "unknown"):
        same(f"list_threads(namespace={ns!r})", as_rows(await cp.alist_threads(namespace=ns)), expected(ns))


@check("namespaces_isolate")
async def _namespaces(env: Env) -> None:
    """The same thread id in two namespaces is two threads, for every operation."""
    cp = await env.new()
    x, y = ThreadBuilder("same", ""), ThreadBuilder("same", "other")
    for th, tag in ((x, "x"), (y, "y")):
        await cp.acommit(checkpoints=[th.step({"who": tag, "list": [tag]}, root=True)])
        await cp.acommit(checkpoints=[th.step({"list": [tag, tag]})])
    await all_read_back("namespace ''", cp, x)
    await all_read_back("namespace 'other'", cp, y)
    expect(await cp.aget("same", y.lineage()[0].id) is None, "a checkpoint was found in the wrong namespace")
    await cp.atake_lease("same", "owner-x")
    await cp.atake_lease("same", "owner-y", namespace="other")  # a lease per namespace
    await cp.aprune("same", keep_last=1)
    await same_history("namespace 'other' after pruning ''", cp, y)
    await cp.adelete_thread("same")
    await all_read_back("namespace 'other' after deleting ''", cp, y)
    expect(await cp.aget("same") is None, "the deleted thread in namespace '' is still readable")


@check("delete_thread")
async def _delete(env: Env) -> None:
    """delete_thread removes checkpoints and pending writes, and nothing of other threads."""
    cp = await env.new()
    gone, stays = ThreadBuilder("gone"), ThreadBuilder("stays")
    for th in (gone, stays):
        await cp.acommit(checkpoints=[th.step({"a": [1]}, root=True), th.step({"a": [1, 2]})])
        await cp.acommit(
            writes=[
                WritesBatch(
                    thread_id=th.thread_id,
                    checkpoint_id=th.lineage()[-1].id,
                    writes=make_writes(("t", "effect", "k", 1)),
                )
            ]
        )
    await cp.adelete_thread("gone")
    expect(await cp.aget("gone") is None, "get() finds a deleted thread")
    expect(await cp.ahistory("gone") == [], "history() of a deleted thread is not empty")
    for cid in gone.by_id:
        expect(await cp.aget("gone", cid) is None, f"checkpoint {cid} of a deleted thread is readable")
    same("list_threads() after a delete", [t.thread_id for t in await cp.alist_threads()], ["stays"])
    await all_read_back("the other thread", cp, stays)
    await cp.adelete_thread("gone")  # deleting what is not there is not an error
    await cp.adelete_thread("never-existed", namespace="nope")
    # Re-creating a checkpoint with an old id must not resurrect the old pending writes.
    old_root = gone.lineage()[-1]
    again = CheckpointWrite(checkpoint=old_root, changed=frozenset(old_root.values))
    await cp.acommit(checkpoints=[again])
    got = await cp.aget("gone")
    same_checkpoint("a re-created thread", got, old_root)
    assert got is not None
    same_writes("a re-created checkpoint", got.pending_writes, ())
    infos = [t for t in await cp.alist_threads() if t.thread_id == "gone"]
    expect(len(infos) == 1 and infos[0].checkpoints == 1, f"a re-created thread is listed as {infos!r}")


@check("prune_keeps_newest_per_branch")
async def _prune(env: Env) -> None:
    """prune keeps the keep_last newest of every branch lineage, reading back identically."""
    cp = await env.new()
    th = ThreadBuilder("t")
    r = th.step({"log": [0], "big": {"k0": "v" * 50}, "const": "root only"}, root=True)
    await cp.acommit(checkpoints=[r])
    for i in range(1, 8):
        await cp.acommit(
            checkpoints=[th.step({"log": [*range(i + 1)], "big": {f"k{j}": "v" * 50 for j in range(i + 1)}})]
        )
    tip = th.head
    assert tip is not None
    fork_from = th.lineage()[4]  # step 3
    branch = th.step({"log": [*range(4), 99]}, parent=fork_from, source="fork")
    await cp.acommit(checkpoints=[branch])
    branch2 = th.step({"const": "changed on the branch"})
    await cp.acommit(checkpoints=[branch2])
    pending = make_writes(("t", "result", "", {"writes": [["log", 5]], "routes": []}))
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=tip.id, writes=pending)])
    other = ThreadBuilder("other")
    await cp.acommit(checkpoints=[other.step({"a": 1}, root=True), other.step({"a": 2})])

    keep = {c.id for c in th.lineage(tip)[:3]} | {c.id for c in th.lineage(branch2.checkpoint)[:3]}
    dropped = await cp.aprune("t", keep_last=3)
    expect(dropped == len(th.by_id) - len(keep), f"prune returned {dropped}, expected {len(th.by_id) - len(keep)}")
    for cid, want in th.by_id.items():
        got = await cp.aget("t", cid)
        if cid in keep:
            expect(got is not None, f"prune dropped {cid}, one of the keep_last newest of a branch")
            assert got is not None
            same_checkpoint(f"kept checkpoint {cid}", replace(got, parent_id=want.parent_id), want)
        else:
            expect(got is None, f"prune kept {cid}, which is not among the keep_last newest of any branch")
    got_tip = await cp.aget("t", tip.id)
    assert got_tip is not None
    same_writes("pending writes of a kept checkpoint", got_tip.pending_writes, pending)
    same("history() after prune", [c.id for c in await cp.ahistory("t")], [c.id for c in th.lineage()[:3]])
    infos = {t.thread_id: t for t in await cp.alist_threads()}
    expect(infos["t"].checkpoints == len(keep), f"list_threads() counts {infos['t'].checkpoints} after prune")
    await all_read_back("another thread after prune", cp, other)
    expect(await cp.aprune("t", keep_last=3) == 0, "a second prune with the same keep_last dropped more")
    expect(await cp.aprune("never-existed", keep_last=1) == 0, "prune of an unknown thread did not return 0")
    try:
        await cp.aprune("t", keep_last=0)
    except ValueError:
        pass
    else:
        fail("prune(keep_last=0) did not raise ValueError")
    after = th.step({"log": [*range(4), 99, 100]})  # only 'log' changed; the rest comes from kept data
    await cp.acommit(checkpoints=[after])
    same_checkpoint("a child committed after prune", await cp.aget("t"), after.checkpoint)


@check("prune_newer_than")
async def _prune_newer_than(env: Env) -> None:
    """prune(newer_than=C) drops what was written after C, in every branch, and keeps what came
    before it (older branches included), so C is the head again, reading back identically."""
    cp = await env.new()
    th = ThreadBuilder("t")
    main = [th.step({"log": [0], "const": "root only"}, root=True)]
    for i in range(1, 4):
        main.append(th.step({"log": [*range(i + 1)]}))
    await cp.acommit(checkpoints=main)
    early = th.step({"log": [0, 1, 77]}, parent=main[1].checkpoint, source="fork")  # a branch before C
    await cp.acommit(checkpoints=[early])
    c = th.step({"log": [*range(5)]}, parent=main[3].checkpoint)
    await cp.acommit(checkpoints=[c])
    pending = make_writes(("t", "result", "", {"writes": [["log", 5]], "routes": []}))
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=c.checkpoint.id, writes=pending)])
    kept = set(th.by_id)
    later = [th.step({"log": [*range(6)]}, parent=c.checkpoint), th.step({"log": [*range(7)]})]
    late_branch = th.step({"log": [0, 1, 2, 88]}, parent=main[2].checkpoint, source="fork")
    await cp.acommit(checkpoints=[*later, late_branch])
    dropped = await cp.aprune("t", newer_than=c.checkpoint.id)
    expect(dropped == 3, f"prune(newer_than=) returned {dropped}, expected the 3 checkpoints written after it")
    for cid, want in th.by_id.items():
        got = await cp.aget("t", cid)
        if cid in kept:
            expect(got is not None, f"prune(newer_than=) dropped {cid}, written before the checkpoint it names")
            assert got is not None
            same_checkpoint(f"kept checkpoint {cid}", got, want)
        else:
            expect(got is None, f"prune(newer_than=) kept {cid}, written after the checkpoint it names")
    head = await cp.aget("t")
    same_checkpoint("the head after prune(newer_than=)", head, c.checkpoint)
    assert head is not None
    same_writes("pending writes of the checkpoint prune(newer_than=) names", head.pending_writes, pending)
    same(
        "history() after prune(newer_than=)",
        [x.id for x in await cp.ahistory("t")],
        [x.id for x in th.lineage(c.checkpoint)],
    )
    infos = {t.thread_id: t for t in await cp.alist_threads()}
    expect(infos["t"].checkpoints == len(kept), f"list_threads() counts {infos['t'].checkpoints} after prune")
    expect(await cp.aprune("t", newer_than=c.checkpoint.id) == 0, "a second prune(newer_than=) dropped more")
    expect(
        await cp.aprune("never-existed", newer_than=c.checkpoint.id) == 0, "prune of an unknown thread did not return 0"
    )
    refusals = (
        ("a checkpoint id the thread lacks", partial(cp.aprune, "t", newer_than="f" * 22), CheckpointNotFoundError),
        ("neither keep_last= nor newer_than=", partial(cp.aprune, "t"), ValueError),
        (
            "both keep_last= and newer_than=",
            partial(cp.aprune, "t", keep_last=1, newer_than=c.checkpoint.id),
            ValueError,
        ),
    )
    for what, call, error in refusals:
        try:
            await call()
        except error:
            pass
        else:
            fail(f"prune() given {what} did not raise {error.__name__}")
    after = th.step({"log": [*range(5), 100]}, parent=c.checkpoint)
    await cp.acommit(checkpoints=[after])
    same_checkpoint("a child committed after prune(newer_than=)", await cp.aget("t"), after.checkpoint)


@check("prune_newer_than_revokes_the_lease")
async def _prune_newer_than_revokes(env: Env) -> None:
    """prune(newer_than=) rewrites the thread under any run holding its lease: the lease is
    revoked (no renewal, no commit under it), and the thread stands as its new head leaves it."""
    cp = await env.new()
    th = ThreadBuilder("t")
    root = th.step({"n": 0}, root=True)
    back = th.step({"n": 1}, next_tasks=[Task(id="next", node="work")])  # still work to do
    await cp.acommit(checkpoints=[root, back, th.step({"n": 2})])
    lease = await cp.atake_lease("t", "a-run")
    expect(await cp.aprune("t", newer_than=back.checkpoint.id) == 1, "prune(newer_than=) did not drop one checkpoint")
    info = await cp.aget_thread("t")
    assert info is not None
    expect(info.lease is None, f"prune(newer_than=) left the run's lease held: {info.lease!r}")
    expect(info.status == "ready", f"the thread is {info.status!r} after prune(newer_than=), not ready (work to do)")
    try:
        await cp.arenew_lease(lease)
    except LeaseLostError:
        pass
    else:
        fail("a lease taken before prune(newer_than=) could still be renewed after it")
    late = th.step({"n": 3}, parent=back.checkpoint)
    try:
        await cp.acommit(checkpoints=[late], fence=Fence(owner="a-run", token=lease.token))
    except LeaseLostError:
        pass
    else:
        fail("a commit under a lease taken before prune(newer_than=) was taken after it")
    same_checkpoint("the head after the refused commit", await cp.aget("t"), back.checkpoint)
