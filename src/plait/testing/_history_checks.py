"""Checks of ``history()``: order, ``limit``, ``before``, ``filter``, and branches after time travel."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, new_checkpoint_id
from plait.testing._harness import (
    Checks,
    Env,
    ThreadBuilder,
    all_read_back,
    expect,
    fail,
    same,
    same_checkpoint,
    same_history,
)

check = Checks()


async def _ten_steps(cp: Checkpointer, th: ThreadBuilder) -> None:
    await cp.acommit(checkpoints=[th.step({"n": 0, "log": []}, root=True, source="input")])
    for i in range(1, 10):
        source = "update" if i in (3, 7) else "loop"
        meta = {"label": "mark"} if i % 4 == 0 else {}
        await cp.acommit(checkpoints=[th.step({"n": i, "log": [*range(i)]}, source=source, metadata=meta)])


@check("history_order_limit_before")
async def _history_walk(env: Env) -> None:
    """history() is newest first, walks parents, honours limit and before."""
    cp = await env.new()
    th = ThreadBuilder("t")
    await _ten_steps(cp, th)
    chain = th.lineage()
    await same_history("history()", cp, th)
    ids = [c.id for c in chain]
    same("history(limit=3)", [c.id for c in await cp.ahistory("t", limit=3)], ids[:3])
    same("history(limit=0)", [c.id for c in await cp.ahistory("t", limit=0)], [])
    same("history(limit=100)", [c.id for c in await cp.ahistory("t", limit=100)], ids)
    same("history(before=5th newest)", [c.id for c in await cp.ahistory("t", before=ids[4])], ids[5:])
    same("history(before=..., limit=2)", [c.id for c in await cp.ahistory("t", before=ids[4], limit=2)], ids[5:7])
    same("history(before=root)", [c.id for c in await cp.ahistory("t", before=ids[-1])], [])
    same("history(before=unknown id)", [c.id for c in await cp.ahistory("t", before=new_checkpoint_id())], [])
    same("history of another thread", await cp.ahistory("other"), [])


@check("history_filter")
async def _history_filter(env: Env) -> None:
    """history(filter=...) keeps entries whose metadata has each key equal; bad keys raise."""
    cp = await env.new()
    th = ThreadBuilder("t")
    await _ten_steps(cp, th)
    chain = th.lineage()

    def ids(pred: Callable[[Checkpoint], bool]) -> list[str]:
        return [c.id for c in chain if pred(c)]

    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"source": "loop"}, ids(lambda c: c.metadata["source"] == "loop")),
        ({"source": "update"}, ids(lambda c: c.metadata["source"] == "update")),
        ({"step": 3}, ids(lambda c: c.step == 3)),
        ({"step": "3"}, []),
        ({"source": "loop", "step": 5}, ids(lambda c: c.step == 5)),
        ({"source": "update", "step": 5}, []),
        ({"label": "mark"}, ids(lambda c: c.metadata.get("label") == "mark")),
        ({"missing_key": 1}, []),
    ]
    for flt, want in cases:
        same(f"history(filter={flt!r})", [c.id for c in await cp.ahistory("t", filter=flt)], want)
    loops = ids(lambda c: c.metadata["source"] == "loop")
    same(
        "history(filter=loop, limit=2)",
        [c.id for c in await cp.ahistory("t", filter={"source": "loop"}, limit=2)],
        loops[:2],
    )
    for bad in ("bad key", "a;drop table x", "", "x'y", "a.b", "k" * 65):
        try:
            await cp.ahistory("t", filter={bad: 1})
        except ValueError:
            continue
        fail(f"history(filter={{{bad!r}: 1}}) did not raise ValueError")


@check("history_follows_newest_branch")
async def _branches(env: Env) -> None:
    """After time travel the head is the new branch; the old branch stays readable by id."""
    cp = await env.new()
    th = ThreadBuilder("t")
    r = th.step({"v": [0], "s": "root"}, root=True, source="input")
    a = th.step({"v": [0, 1]})
    b = th.step({"v": [0, 1, 2]})
    c = th.step({"v": [0, 1, 2, 3], "s": "old branch"})
    await cp.acommit(checkpoints=[r, a, b, c])
    d = th.step({"v": [0, 1, 9]}, parent=a.checkpoint, source="fork")
    await cp.acommit(checkpoints=[d])
    e = th.step({"s": "new branch"})
    await cp.acommit(checkpoints=[e])

    def ids(cps: Iterable[Checkpoint]) -> list[str]:
        return [x.id for x in cps]

    same_checkpoint("get() after time travel", await cp.aget("t"), e.checkpoint)
    same(
        "history() after time travel",
        ids(await cp.ahistory("t")),
        ids([e.checkpoint, d.checkpoint, a.checkpoint, r.checkpoint]),
    )
    same(
        "history(before=old tip)",
        ids(await cp.ahistory("t", before=c.checkpoint.id)),
        ids([b.checkpoint, a.checkpoint, r.checkpoint]),
    )
    await all_read_back("both branches", cp, th)
    infos = await cp.alist_threads()
    expect(len(infos) == 1 and infos[0].checkpoints == 6, f"list_threads() after a branch: {infos!r}")
    expect(infos[0].head_id == e.checkpoint.id, f"list_threads() head is {infos[0].head_id}, expected the new tip")


@check("tree_lists_every_branch")
async def _tree(env: Env) -> None:
    """tree() maps every checkpoint of the thread, each branch's too, to its parent."""
    cp = await env.new()
    same("tree() of an unknown thread", await cp.atree("t"), {})
    th = ThreadBuilder("t")
    r = th.step({"v": [0]}, root=True, source="input")
    a = th.step({"v": [0, 1]})
    b = th.step({"v": [0, 1, 2]})
    await cp.acommit(checkpoints=[r, a, b])
    c = th.step({"v": [0, 9]}, parent=a.checkpoint, source="fork")
    await cp.acommit(checkpoints=[c])
    d = th.step({"v": [7]}, parent=r.checkpoint, source="fork")
    await cp.acommit(checkpoints=[d])
    other = ThreadBuilder("u")
    await cp.acommit(checkpoints=[other.step({"v": []}, root=True, source="input")])
    want = {x.checkpoint.id: x.checkpoint.parent_id for x in (r, a, b, c, d)}
    got = await cp.atree("t")
    same("tree() after two forks", got, want)
    same("tree() lists oldest first", list(got), sorted(want))
    same("tree() of another thread", list(await cp.atree("u")), [other.lineage()[0].id])
