"""Checks of commits: pending writes, folding them, several checkpoints in one commit, and a
failed commit leaving nothing behind.
"""

from __future__ import annotations

from dataclasses import replace

from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint.model import CheckpointWrite, PendingWrite, WritesBatch
from plait.testing._harness import (
    Checks,
    Env,
    ThreadBuilder,
    all_read_back,
    expect,
    make_writes,
    same,
    same_checkpoint,
    same_history,
    same_writes,
)

check = Checks()


def _writes_key(w: PendingWrite) -> tuple[str, str, str]:
    return (w.task_id, w.kind, w.key)


@check("pending_writes_upsert_and_scope")
async def _pending_writes(env: Env) -> None:
    """Pending writes come back on their checkpoint only; same (task, kind, key) replaces."""
    cp = await env.new()
    th = ThreadBuilder("t")
    root = th.step({"a": 1}, root=True)
    child = th.step({"a": 2})
    await cp.acommit(checkpoints=[root, child])
    rid, cid = root.checkpoint.id, child.checkpoint.id
    first = make_writes(
        ("t1", "result", "", {"writes": [["a", 5], ["b", [1, 2]]], "routes": ["next"]}),
        ("t2", "effect", "charge", {"receipt": "r-1", "amount": 12.5}),
        ("t2", "effect", "email", "sent"),
        ("t3", "interrupt", "", {"id": "i-1", "value": {"question": "ok?"}}),
        ("", "breakpoint", "", None),
    )
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=first)])
    got = await cp.aget("t", rid)
    assert got is not None
    same_writes("get(root)", got.pending_writes, first)
    head = await cp.aget("t")
    expect(head is not None and head.pending_writes == (), "the head shows pending writes saved on its parent")
    again = make_writes(
        ("t1", "result", "", {"writes": [["a", 6]], "routes": []}),
        ("t3", "resume", "", ["yes"]),
    )
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=again)])
    expected = {_writes_key(w): w for w in first + again}
    got = await cp.aget("t", rid)
    assert got is not None
    same_writes("get(root) after an upsert", got.pending_writes, expected.values())
    on_child = make_writes(("c1", "result", "", {"writes": [], "routes": []}))
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=cid, writes=on_child)])
    got = await cp.aget("t")
    assert got is not None
    same_writes("get() of the head", got.pending_writes, on_child)
    got = await cp.aget("t", rid)
    assert got is not None
    same_writes("get(root) after writes on its child", got.pending_writes, expected.values())
    for entry in await cp.ahistory("t"):
        expect(entry.pending_writes == (), f"history() entry {entry.id} includes pending writes")


@check("fold_parent_writes")
async def _fold(env: Env) -> None:
    """A child with folds_parent_writes deletes its parent's pending writes; without, keeps them."""
    cp = await env.new()
    th = ThreadBuilder("t")
    root = th.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[root])
    rid = root.checkpoint.id
    saved = make_writes(("t1", "result", "", {"writes": [["a", 2]], "routes": []}), ("t1", "effect", "x", 1))
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=saved)])
    kept = th.step({"a": 2}, parent=root.checkpoint, source="update")
    await cp.acommit(checkpoints=[kept])
    got = await cp.aget("t", rid)
    assert got is not None
    same_writes("parent after a child without folds_parent_writes", got.pending_writes, saved)
    folded = th.step({"a": 3}, parent=root.checkpoint, fold=True)
    await cp.acommit(checkpoints=[folded])
    got = await cp.aget("t", rid)
    assert got is not None
    same_writes("parent after a child with folds_parent_writes", got.pending_writes, ())
    same_checkpoint("the parent itself after the fold", got, root.checkpoint)
    same_checkpoint("the head after the fold", await cp.aget("t"), folded.checkpoint)


@check("one_commit_many_checkpoints")
async def _one_commit(env: Env) -> None:
    """One commit can hold a parent and its child, several threads, and pending writes."""
    cp = await env.new()
    a, b = ThreadBuilder("a"), ThreadBuilder("b", namespace="ns")
    a_root = a.step({"x": [1], "y": "kept"}, root=True)
    a_child = a.step({"x": [1, 2]})
    a_grandchild = a.step({"z": True})
    b_root = b.step({"x": "b"}, root=True)
    w_a = make_writes(("t", "result", "", {"writes": [["x", 3]], "routes": []}))
    w_b = make_writes(("u", "effect", "k", 7))
    await cp.acommit(
        checkpoints=[a_root, a_child, a_grandchild, b_root],
        writes=[
            WritesBatch(thread_id="a", checkpoint_id=a_grandchild.checkpoint.id, writes=w_a),
            WritesBatch(thread_id="b", namespace="ns", checkpoint_id=b_root.checkpoint.id, writes=w_b),
        ],
    )
    await all_read_back("thread a", cp, a)
    await all_read_back("thread b", cp, b)
    await same_history("thread a", cp, a)
    got_a, got_b = await cp.aget("a"), await cp.aget("b", namespace="ns")
    assert got_a is not None and got_b is not None
    same_writes("thread a head", got_a.pending_writes, w_a)
    same_writes("thread b head", got_b.pending_writes, w_b)


class _NotJson:
    """A value no backend can encode; slipped past freeze() to make a commit fail."""


def _poisoned(cw: CheckpointWrite, channel: str) -> CheckpointWrite:
    values = FrozenDict({**cw.checkpoint.values, channel: FrozenList([1, _NotJson()])})
    return replace(cw, checkpoint=replace(cw.checkpoint, values=values), changed=cw.changed | {channel})


@check("failed_commit_leaves_nothing")
async def _failed_commit(env: Env) -> None:
    """A commit that fails (a value that cannot be encoded) leaves nothing of itself behind.

    A backend that keeps values as Python objects (memory) may accept the value; then there is
    no failure to observe and only the store's continued health is checked."""
    cp = await env.new()
    old = ThreadBuilder("old")
    base = old.step({"a": [1, 2, 3], "b": "x"}, root=True)
    await cp.acommit(checkpoints=[base])
    saved = make_writes(("t1", "result", "", {"writes": [["a", 4]], "routes": []}))
    await cp.acommit(writes=[WritesBatch(thread_id="old", checkpoint_id=base.checkpoint.id, writes=saved)])
    before = await cp.alist_threads()

    extra = make_writes(("t2", "effect", "e", "extra"))
    fresh = ThreadBuilder("fresh")
    for variant in ("bad checkpoint last", "bad pending write last"):
        folding = old.step({"a": [1, 2, 3, 4]}, parent=base.checkpoint, fold=True)
        new_root = fresh.step({"v": 1}, root=True)
        bad_root = ThreadBuilder("bad").step({"v": 1}, root=True)
        checkpoints = [folding, new_root]
        batches = [WritesBatch(thread_id="old", checkpoint_id=base.checkpoint.id, writes=extra)]
        if variant == "bad checkpoint last":
            checkpoints.append(_poisoned(bad_root, "boom"))
        else:
            checkpoints.append(bad_root)
            poison = PendingWrite(task_id="t9", kind="effect", key="boom", value=FrozenList([_NotJson()]))
            batches.append(WritesBatch(thread_id="old", checkpoint_id=base.checkpoint.id, writes=(poison,)))
        try:
            await cp.acommit(checkpoints=checkpoints, writes=batches)
        except Exception:
            pass
        else:
            for th in (old, fresh):  # accepted: drop what the store now holds, start over
                await cp.adelete_thread(th.thread_id)
            await cp.adelete_thread("bad")
            return
        what = f"after a failed commit ({variant})"
        for tid in ("fresh", "bad"):
            expect(await cp.aget(tid) is None, f"{what}: thread {tid!r} of the failed commit exists")
            expect(await cp.ahistory(tid) == [], f"{what}: thread {tid!r} of the failed commit has history")
        expect(
            await cp.aget("old", folding.checkpoint.id) is None, f"{what}: a checkpoint of the failed commit was stored"
        )
        got = await cp.aget("old")
        same_checkpoint(f"{what}: the old head", got, base.checkpoint)
        assert got is not None
        same_writes(f"{what}: the old head", got.pending_writes, saved)
        same(f"{what}: list_threads()", [t.thread_id for t in await cp.alist_threads()], [t.thread_id for t in before])
        del old.by_id[folding.checkpoint.id], fresh.by_id[new_root.checkpoint.id]
        old.head = base.checkpoint
    ok = old.step({"a": [1, 2, 3, 5]}, fold=True)
    await cp.acommit(checkpoints=[ok])
    same_checkpoint("a commit after failed ones", await cp.aget("old"), ok.checkpoint)
    await all_read_back("after failed commits", cp, old)
