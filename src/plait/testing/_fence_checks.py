"""Checks of fenced commits: a commit refused by its fence writes nothing, and refuses only
itself (a store that folds concurrent commits into one transaction must not sink the rest).

A fence is what keeps a run that lost its lease from writing on top of the run that took the
thread over, and what lets a one-off write (``update_state``) commit without taking a lease:
both depend on the check being part of the commit, which these checks pin from outside.
"""

from __future__ import annotations

import asyncio

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Fence, WritesBatch
from plait.errors import ConcurrentUpdateError, LeaseLostError, ThreadBusyError
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
    same_history,
)

check = Checks()


async def _nothing_stored(what: str, cp: Checkpointer, thread_id: str) -> None:
    expect(await cp.aget(thread_id) is None, f"{what}: thread {thread_id!r} got a checkpoint")
    expect(await cp.ahistory(thread_id) == [], f"{what}: thread {thread_id!r} got history")


@check("fence_refuses_another_owner")
async def _refuses(env: Env) -> None:
    """A one-off commit (no token) touching a thread with a live lease is ThreadBusyError and writes nothing."""
    cp = await env.new()
    held = await cp.atake_lease("t", "A", ttl=30)
    th = ThreadBuilder("t")
    root = th.step({"a": 1}, root=True)
    for owner in ("B", "A"):  # a one-off write holds no lease, whatever owner it names
        try:
            await cp.acommit(checkpoints=[root], fence=Fence(owner=owner))
        except ThreadBusyError as exc:
            busy(exc, "t", "A", 30)
        else:
            fail(f"a one-off commit by {owner!r} was stored while 'A' held the thread's lease")
    await _nothing_stored("after a refused commit", cp, "t")

    # The whole commit is refused when any thread it touches is held, here through writes only.
    free, mine = ThreadBuilder("free"), ThreadBuilder("t")
    free_root, held_root = free.step({"v": 1}, root=True), mine.step({"v": 2}, root=True)
    await cp.acommit(checkpoints=[held_root], fence=Fence(owner="A", token=held.token))  # the holder may write
    saved = make_writes(("t1", "result", "", {"writes": [["v", 3]], "routes": []}))
    batch = WritesBatch(thread_id="t", checkpoint_id=held_root.checkpoint.id, writes=saved)
    try:
        await cp.acommit(checkpoints=[free_root], writes=[batch], fence=Fence(owner="B"))
    except ThreadBusyError as exc:
        busy(exc, "t", "A", 30)
    else:
        fail("a commit whose pending writes touch a thread held by another owner was stored")
    await _nothing_stored("after a refused commit of two threads", cp, "free")
    got = await cp.aget("t")
    expect(got is not None and got.pending_writes == (), "a refused commit stored its pending writes")
    await same_history("the held thread after the refused commit", cp, mine)
    await all_read_back("the held thread after the refused commit", cp, mine)


@check("fence_token")
async def _token(env: Env) -> None:
    """A run's commit (with a token) lands while its lease is the current one, expired or not, and never after.

    What makes one run per thread hold: a run that stalled past its lease, whose thread was
    taken over, is refused with LeaseLostError and writes nothing, even once the new lease
    has expired or been given back."""
    cp = await env.new()
    th = ThreadBuilder("t")
    old = await cp.atake_lease("t", "A", ttl=0.2)
    root = th.step({"n": 0}, root=True)
    await cp.acommit(checkpoints=[root], fence=Fence(owner="A", token=old.token))
    await asyncio.sleep(0.6)  # A's lease expired; nobody took the thread: A may still write
    step = th.step({"n": 1})
    await cp.acommit(checkpoints=[step], fence=Fence(owner="A", token=old.token))
    new = await cp.atake_lease("t", "B", ttl=0.2)  # taken over
    stale = ThreadBuilder("t").step({"n": -1}, root=True)
    for what in ("while the taker holds it", "after the taker's lease expired", "after the taker gave it back"):
        if what == "after the taker's lease expired":
            await asyncio.sleep(0.6)
        if what == "after the taker gave it back":
            await cp.arelease_lease(new)
        saved = make_writes(("t1", "effect", "charge", "again"))
        try:
            await cp.acommit(
                checkpoints=[stale],
                writes=[WritesBatch(thread_id="t", checkpoint_id=step.checkpoint.id, writes=saved)],
                fence=Fence(owner="A", token=old.token),
            )
        except LeaseLostError as exc:
            same("LeaseLostError.token", exc.token, old.token)
        else:
            fail(f"a commit under a lease that was taken over was stored {what}")
        expect(await cp.aget("t", stale.checkpoint.id) is None, f"a refused commit stored its checkpoint {what}")
        got = await cp.aget("t")
        expect(got is not None and got.pending_writes == (), f"a refused commit stored its pending writes {what}")
    await all_read_back("after the stale run's refused commits", cp, th)


@check("fence_lease_namespace")
async def _lease_namespace(env: Env) -> None:
    """A commit with ``Fence.lease_namespace`` (a subgraph's, in a child namespace) is fenced by
    the lease of that namespace's thread: it lands while that lease is current, and is refused
    with LeaseLostError, writing nothing, once it was given back or taken over."""
    cp = await env.new()
    parent = await cp.atake_lease("t", "A", ttl=30)
    child = ThreadBuilder("t", namespace="sub:1")
    fence = Fence(owner="A", token=parent.token, lease_namespace="")
    root = child.step({"n": 0}, root=True)
    await cp.acommit(checkpoints=[root], fence=fence)
    await all_read_back("a child namespace written under its parent's lease", cp, child)
    await cp.arelease_lease(parent)
    taken = await cp.atake_lease("t", "B", ttl=30)
    for what in ("after the parent's lease was taken over", "after the taker gave it back"):
        if what == "after the taker gave it back":
            await cp.arelease_lease(taken)
        late = child.step({"n": 1}, parent=root.checkpoint)
        try:
            await cp.acommit(checkpoints=[late], fence=fence)
        except LeaseLostError as exc:
            same("LeaseLostError.token", exc.token, parent.token)
        else:
            fail(f"a child namespace's commit under its parent's old lease was stored {what}")
        del child.by_id[late.checkpoint.id]
        child.head = root.checkpoint
        expect(
            await cp.aget("t", late.checkpoint.id, namespace="sub:1") is None,
            f"a refused child commit stored its checkpoint {what}",
        )
    await all_read_back("the child namespace after the refused commits", cp, child)


@check("fence_allows_expired_released_or_no_lease")
async def _allows(env: Env) -> None:
    """A one-off commit lands when the lease expired (revoking it), was given back, or never was."""
    cp = await env.new()
    expired, released, never = (ThreadBuilder(t) for t in ("expired", "released", "never"))
    stalled = await cp.atake_lease("expired", "X", ttl=0.2)
    await cp.arelease_lease(await cp.atake_lease("released", "X", ttl=30))
    await asyncio.sleep(0.6)
    for th in (expired, released, never):
        root = th.step({"n": th.thread_id}, root=True)
        await cp.acommit(checkpoints=[root], fence=Fence(owner="A"))
        child = th.step({"n": [1, 2]})
        saved = make_writes(("t1", "effect", "k", th.thread_id))
        await cp.acommit(
            checkpoints=[child],
            writes=[WritesBatch(thread_id=th.thread_id, checkpoint_id=child.checkpoint.id, writes=saved)],
            fence=Fence(owner="A"),
        )
        await all_read_back(f"thread {th.thread_id!r}", cp, th)
        await same_history(f"thread {th.thread_id!r}", cp, th)
    try:
        await cp.acommit(
            checkpoints=[ThreadBuilder("expired").step({"n": "late"}, root=True)],
            fence=Fence(owner="X", token=stalled.token),
        )
    except LeaseLostError:
        pass
    else:
        fail("a one-off write did not revoke the expired lease it wrote past: its stalled holder wrote after it")
    await cp.atake_lease("expired", "B")  # the revoked lease holds nothing


@check("fence_expect_head")
async def _expect_head(env: Env) -> None:
    """expect_head: None fits an empty thread, a landed commit may retry; else ConcurrentUpdateError, nothing written.

    A retry of a commit that landed finds its own checkpoint as the head, which must pass: a
    backend retrying a commit whose outcome it lost must not turn it into a refusal."""
    cp = await env.new()
    th = ThreadBuilder("t")
    root = th.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[root], fence=Fence(owner="U", expect_head=None))
    first = th.step({"a": 2})
    await cp.acommit(checkpoints=[first], fence=Fence(owner="U", expect_head=root.checkpoint.id))
    # The same commit again (a retry after a lost connection whose first attempt landed)
    # finds its own checkpoint as the head: it is accepted and changes nothing.
    await cp.acommit(checkpoints=[first], fence=Fence(owner="U", expect_head=root.checkpoint.id))
    stale = th.step({"a": 3}, parent=root.checkpoint)  # built on a head that is no longer one
    del th.by_id[stale.checkpoint.id]
    th.head = first.checkpoint
    saved = make_writes(("t1", "result", "", {"writes": [["a", 9]], "routes": []}))
    batch = WritesBatch(thread_id="t", checkpoint_id=stale.checkpoint.id, writes=saved)
    for expected, cw, what in (
        (root.checkpoint.id, stale, "a stale head"),
        (None, ThreadBuilder("t").step({"a": 4}, root=True), "None (an empty thread)"),
    ):
        try:
            await cp.acommit(checkpoints=[cw], writes=[batch], fence=Fence(owner="U", expect_head=expected))
        except ConcurrentUpdateError as exc:
            expect(exc.thread_id == "t", f"ConcurrentUpdateError.thread_id is {exc.thread_id!r}, expected 't'")
            same("ConcurrentUpdateError.expected", exc.expected, expected)
            same("ConcurrentUpdateError.found", exc.found, first.checkpoint.id)
        else:
            fail(f"a commit expecting {what} was stored on a thread whose head is {first.checkpoint.id}")
        expect(await cp.aget("t", cw.checkpoint.id) is None, f"a commit expecting {what} stored its checkpoint")
    await all_read_back("after refused commits", cp, th)
    await same_history("after refused commits", cp, th)
    got = await cp.aget("t")
    expect(got is not None and got.pending_writes == (), "a refused commit stored its pending writes")
    await _nothing_stored("a never-written thread", cp, "u")


@check("fence_expect_no_writes")
async def _expect_no_writes(env: Env) -> None:
    """expect_no_writes: a head with pending writes is ConcurrentUpdateError (pending_writes), nothing written.

    What a commit built on a remembered head (``known_head``) relies on: a run in another
    process may have saved task results on that head since, and a commit that did not carry
    them must not land on top of them. A head without writes, and a retry that finds its
    own checkpoint, pass; ``known_head`` itself, when the backend has one, never offers a
    head with pending writes."""
    cp = await env.new()
    th = ThreadBuilder("t")
    root = th.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[root])
    first = th.step({"a": 2})
    quiet = Fence(owner="U", expect_head=root.checkpoint.id, expect_no_writes=True)
    await cp.acommit(checkpoints=[first], fence=quiet)  # no writes on root: it lands
    await cp.acommit(checkpoints=[first], fence=quiet)  # a retry finding itself lands too
    saved = make_writes(("t1", "result", "", {"writes": [["a", 9]], "routes": []}))
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=first.checkpoint.id, writes=saved)])
    known = cp.known_head("t")
    expect(known is None or known.id != first.checkpoint.id, "known_head() offered a head with pending writes")
    blind = th.step({"a": 3})
    try:
        await cp.acommit(
            checkpoints=[blind], fence=Fence(owner="U", expect_head=first.checkpoint.id, expect_no_writes=True)
        )
    except ConcurrentUpdateError as exc:
        expect(exc.pending_writes, "ConcurrentUpdateError.pending_writes is False for a head with pending writes")
        same("ConcurrentUpdateError.found", exc.found, first.checkpoint.id)
    else:
        fail("a commit expecting a head without pending writes was stored on a head that has some")
    expect(await cp.aget("t", blind.checkpoint.id) is None, "a refused commit stored its checkpoint")
    got = await cp.aget("t")
    expect(got is not None and got.id == first.checkpoint.id, "the head moved after a refused commit")
    expect(got is not None and len(got.pending_writes) == 1, "the head's pending writes changed")
    # Without expect_no_writes the same commit lands (the caller read the writes and chose).
    await cp.acommit(checkpoints=[blind], fence=Fence(owner="U", expect_head=first.checkpoint.id))
    got = await cp.aget("t")
    expect(got is not None and got.id == blind.checkpoint.id, "a commit fenced on its head did not land")


@check("fence_expect_parent_no_writes")
async def _expect_parent_no_writes(env: Env) -> None:
    """expect_parent_no_writes: a commit's parent that is gone or has pending writes is
    ConcurrentUpdateError (``parent``), nothing written; a parent without writes passes.

    What an update built on a past checkpoint the backend remembers (``known_checkpoint``)
    relies on: another process may have saved task results on it since (a run branching
    from it that failed), or deleted the thread."""
    cp = await env.new()
    th = ThreadBuilder("t")
    root = th.step({"a": 1}, root=True)
    middle = th.step({"a": 2})
    await cp.acommit(checkpoints=[root, middle])
    fence = Fence(owner="U", expect_head=middle.checkpoint.id, expect_parent_no_writes=True)
    branch = th.step({"a": 3}, parent=root.checkpoint)
    await cp.acommit(checkpoints=[branch], fence=fence)  # root has no writes: it lands
    saved = make_writes(("t1", "result", "", {"writes": [["a", 9]], "routes": []}))
    await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=root.checkpoint.id, writes=saved)])
    blind = th.step({"a": 4}, parent=root.checkpoint)
    fence = Fence(owner="U", expect_head=branch.checkpoint.id, expect_parent_no_writes=True)
    try:
        await cp.acommit(checkpoints=[blind], fence=fence)
    except ConcurrentUpdateError as exc:
        expect(exc.parent and exc.pending_writes, "ConcurrentUpdateError for a parent's writes: not parent/pending")
        same("ConcurrentUpdateError.found", exc.found, root.checkpoint.id)
    else:
        fail("a commit expecting a parent without pending writes was stored on a parent that has some")
    expect(await cp.aget("t", blind.checkpoint.id) is None, "a refused commit stored its checkpoint")
    gone = ThreadBuilder("u")
    lone = gone.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[lone])
    orphan = gone.step({"a": 2})
    await cp.adelete_thread("u")
    try:
        await cp.acommit(checkpoints=[orphan], fence=Fence(owner="U", expect_parent_no_writes=True))
    except ConcurrentUpdateError as exc:
        expect(exc.parent and exc.found is None, "ConcurrentUpdateError for a parent gone: found is not None")
    else:
        fail("a commit expecting its parent stored was stored on a parent that was deleted")
    await _nothing_stored("a commit on a deleted parent", cp, "u")


@check("fence_refusals_stay_alone")
async def _alone(env: Env) -> None:
    """Concurrent commits: a fence refuses only its own commit; of two expecting one head, one lands."""
    cp = await env.new()
    await cp.atake_lease("held", "A", ttl=30)
    builders = [ThreadBuilder(f"t{i}") for i in range(6)]
    roots = [b.step({"i": i}, root=True) for i, b in enumerate(builders)]
    refused = ThreadBuilder("held").step({"i": -1}, root=True)
    commits = [cp.acommit(checkpoints=[r], fence=Fence(owner="B")) for r in roots[:3]]
    commits.append(cp.acommit(checkpoints=[refused], fence=Fence(owner="B")))
    commits += [cp.acommit(checkpoints=[r], fence=Fence(owner="B")) for r in roots[3:]]
    results = await asyncio.gather(*commits, return_exceptions=True)
    for i, result in enumerate(results):
        if i == 3:
            expect(isinstance(result, ThreadBusyError), f"the commit to the held thread gave {result!r}")
        else:
            expect(result is None, f"a commit next to a refused one failed: {result!r}")
    for b in builders:
        await all_read_back(f"thread {b.thread_id!r}", cp, b)
    await _nothing_stored("the held thread", cp, "held")

    th = ThreadBuilder("race")
    root = th.step({"n": 0}, root=True)
    await cp.acommit(checkpoints=[root])
    one, two = th.step({"n": 1}, parent=root.checkpoint), th.step({"n": 2}, parent=root.checkpoint)
    fence = Fence(owner="U", expect_head=root.checkpoint.id)
    outcome = await asyncio.gather(
        cp.acommit(checkpoints=[one], fence=fence), cp.acommit(checkpoints=[two], fence=fence), return_exceptions=True
    )
    won = [cw for cw, r in zip((one, two), outcome, strict=True) if r is None]
    lost = [r for r in outcome if r is not None]
    expect(len(won) == 1, f"two commits expecting one head: {len(won)} landed ({outcome!r})")
    expect(
        len(lost) == 1 and isinstance(lost[0], ConcurrentUpdateError),
        f"the second of two commits expecting one head gave {lost!r}",
    )
    head = await cp.aget("race")
    expect(head is not None and head.id == won[0].checkpoint.id, "the thread's head is not the commit that landed")
    loser = two if won[0] is one else one
    expect(await cp.aget("race", loser.checkpoint.id) is None, "the refused commit's checkpoint was stored")
