"""Checks of how threads stand: statuses derived from what is stored, listings filtered by
status and paged in the store, one thread looked up."""

from __future__ import annotations

import asyncio
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Task, ThreadInfo, WritesBatch
from plait.testing._harness import Checks, Env, ThreadBuilder, expect, fail, make_writes, same

check = Checks()

_ERROR = {"node": "a", "step": 1, "error": "NodeError", "type": "builtins.ValueError", "message": "no", "traceback": ""}
_ASK = {"id": "i", "value": "ok?", "node": "a", "task_id": "t1", "index": 0}


async def _statuses(cp: Checkpointer, namespace: str | None = None) -> dict[str, str]:
    return {t.thread_id: t.status for t in await cp.alist_threads(namespace=namespace)}


@check("thread_statuses")
async def _thread_statuses(env: Env) -> None:
    """idle, ready, interrupted, error from what a one-off commit stores; busy under a live
    lease, stale once lapsed (and only then: a fork or an update with work to do is ready)."""
    cp = await env.new()
    planned = (Task(id="t1", node="a"),)
    idle = ThreadBuilder("idle").step({"n": 1}, root=True)
    await cp.acommit(checkpoints=[idle])
    await cp.acommit(checkpoints=[ThreadBuilder("ready").step({"n": 1}, root=True, next_tasks=planned)])
    for name, kind, value in (("interrupted", "interrupt", _ASK), ("error", "error", _ERROR)):
        root = ThreadBuilder(name).step({"n": 1}, root=True, next_tasks=planned)
        saved = make_writes(("t1", kind, "0", value))
        await cp.acommit(
            checkpoints=[root], writes=[WritesBatch(thread_id=name, checkpoint_id=root.checkpoint.id, writes=saved)]
        )
    same(
        "statuses after one-off commits",
        await _statuses(cp),
        {"idle": "idle", "ready": "ready", "interrupted": "interrupted", "error": "error"},
    )
    for status in ("ready", "stale"):
        listed = [t.thread_id for t in await cp.alist_threads(status=status)]
        same(f"the threads listed with status={status!r}", listed, ["ready"] if status == "ready" else [])
    old = await cp.atake_lease("ready", "an older plait")
    await cp.arelease_lease(old, status="stale")  # how plait stored "ready" before it existed
    info = await cp.aget_thread("ready")
    expect(info is not None and info.status == "ready", f"a thread given back 'stale' reads {info!r}, not ready")
    same(
        "status='ready' lists a thread given back 'stale'",
        [t.thread_id for t in await cp.alist_threads(status="ready")],
        ["ready"],
    )
    lease = await cp.atake_lease("idle", "A", ttl=0.3)
    info = await cp.aget_thread("idle")
    expect(info is not None and info.status == "busy", f"a thread under a live lease reads {info!r}")
    expect(
        info is not None and info.lease is not None and info.lease.token == lease.token and info.lease.owner == "A",
        f"a busy thread's listing names its lease: {info!r}",
    )
    await asyncio.sleep(0.8)  # lapsed: the run that held it stalled or died elsewhere
    info = await cp.aget_thread("idle")
    expect(info is not None and info.status == "stale", f"a thread whose lease lapsed reads {info!r}")
    same(
        "status='stale' lists the lapsed thread",
        [t.thread_id for t in await cp.alist_threads(status="stale")],
        ["idle"],
    )
    await cp.arelease_lease(lease, status="error")
    info = await cp.aget_thread("idle")
    expect(
        info is not None and info.status == "error" and info.lease is None, f"after release(status='error'): {info!r}"
    )
    await cp.arelease_lease(await cp.atake_lease("idle", "B"))  # no status: as it was
    info = await cp.aget_thread("idle")
    expect(info is not None and info.status == "error", f"a release without a status changed it: {info!r}")
    expect(await cp.aget_thread("never") is None, "aget_thread found a thread that has no checkpoint")


@check("thread_listings")
async def _thread_listings(env: Env) -> None:
    """alist_threads: newest activity first, filtered by status, paged by limit and cursor, per namespace."""
    cp = await env.new()
    names = [f"t{i:02d}" for i in range(7)]
    for name in names:
        await cp.acommit(checkpoints=[ThreadBuilder(name).step({"n": name}, root=True)])
        await asyncio.sleep(0.002)  # distinct times: the order is the order of activity
    other = ThreadBuilder("t00", namespace="other").step({"n": 0}, root=True)
    await cp.acommit(checkpoints=[other])
    lease = await cp.atake_lease("t03", "A")  # taken: t03 is busy, and the most recently active
    every = await cp.alist_threads(namespace="")
    same("the listing's order", [t.thread_id for t in every], ["t03", *reversed([n for n in names if n != "t03"])])
    _ordered(every)
    pages: list[str] = []
    before: str | None = None
    while True:
        page = await cp.alist_threads(namespace="", limit=3, before=before)
        expect(len(page) <= 3, f"a page of limit=3 has {len(page)} threads")
        pages += [t.thread_id for t in page]
        if len(page) < 3:
            break
        before = page[-1].cursor
    same("the threads paged three at a time", pages, [t.thread_id for t in every])
    same("busy threads", [t.thread_id for t in await cp.alist_threads(status="busy")], ["t03"])
    same("idle threads of namespace ''", len(await cp.alist_threads(namespace="", status="idle")), 6)
    same("idle threads, at most 2", len(await cp.alist_threads(status="idle", limit=2)), 2)
    same("threads of namespace 'other'", [t.namespace for t in await cp.alist_threads(namespace="other")], ["other"])
    same("threads of every namespace", len(await cp.alist_threads()), 8)
    await cp.arelease_lease(lease)
    for bad in ({"status": "sleeping"}, {"limit": 0}, {"before": "not a cursor"}):
        await refused_listing(cp, **bad)


@check("thread_prefix")
async def _thread_prefix(env: Env) -> None:
    """alist_threads(prefix=): only thread ids that start with it, with the other filters and
    the paging; characters that mean something to SQL's LIKE are only themselves."""
    cp = await env.new()
    names = ["run-1", "run-2", "run-10", "rung", "other", "50%_off", "50%x", "_x", "a\\b", "ünï-1"]
    for name in names:
        await cp.acommit(checkpoints=[ThreadBuilder(name).step({"n": name}, root=True)])
    await cp.acommit(checkpoints=[ThreadBuilder("run-9", namespace="ns").step({"n": 9}, root=True)])

    async def ids(**kw: Any) -> list[str]:
        return sorted(t.thread_id for t in await cp.alist_threads(**kw))

    same("prefix 'run-'", await ids(prefix="run-"), ["run-1", "run-10", "run-2", "run-9"])
    same("prefix 'run-' in namespace ''", await ids(prefix="run-", namespace=""), ["run-1", "run-10", "run-2"])
    same("prefix 'run-1'", await ids(prefix="run-1"), ["run-1", "run-10"])
    same("prefix '50%'", await ids(prefix="50%"), ["50%_off", "50%x"])
    same("prefix '50%_'", await ids(prefix="50%_"), ["50%_off"])
    same("prefix '_'", await ids(prefix="_"), ["_x"])
    same("prefix 'a\\'", await ids(prefix="a\\"), ["a\\b"])
    same("prefix 'ünï'", await ids(prefix="ünï"), ["ünï-1"])
    same("prefix 'zzz'", await ids(prefix="zzz"), [])
    same("prefix ''", len(await ids(prefix="")), len(names) + 1)
    same("prefix 'run-', idle", await ids(prefix="run-", status="idle"), ["run-1", "run-10", "run-2", "run-9"])
    first = await cp.alist_threads(prefix="run-", limit=2)
    rest = await cp.alist_threads(prefix="run-", limit=10, before=first[-1].cursor)
    same("prefix 'run-' paged", sorted(t.thread_id for t in first + rest), ["run-1", "run-10", "run-2", "run-9"])
    for bad in (3, "a\x00b"):
        await refused_listing(cp, prefix=bad)


async def refused_listing(cp: Checkpointer, **bad: Any) -> None:
    """Fail unless ``alist_threads(**bad)`` raises ValueError."""
    try:
        await cp.alist_threads(**bad)
    except ValueError:
        return
    fail(f"alist_threads({', '.join(f'{k}={v!r}' for k, v in bad.items())}) was accepted")


def _ordered(infos: list[ThreadInfo]) -> None:
    keys = [(t.updated_at, t.namespace, t.thread_id) for t in infos]
    expect(keys == sorted(keys, reverse=True), f"a listing is not newest first: {keys}")


@check("subgraph_status")
async def _subgraph_status(env: Env) -> None:
    """A subgraph's namespace belongs to its parent thread: busy while the parent's lease is
    held (listed so, found by status='busy', absent from its own status at rest), as it was
    once the lease is given back."""
    cp = await env.new()
    planned = (Task(id="t1", node="a"),)
    await cp.acommit(checkpoints=[ThreadBuilder("p").step({"n": 1}, root=True, next_tasks=planned)])
    await cp.acommit(checkpoints=[ThreadBuilder("p", "sub:t1").step({"m": 1}, root=True, next_tasks=planned)])
    await cp.acommit(checkpoints=[ThreadBuilder("q", "sub:t2").step({"m": 1}, root=True, next_tasks=planned)])

    async def child(thread: str = "p", ns: str = "sub:t1") -> str | None:
        info = await cp.aget_thread(thread, namespace=ns)
        return None if info is None else info.status

    expect(await child() == "ready", f"a subgraph's namespace at rest reads {await child()!r}, not ready")
    lease = await cp.atake_lease("p", "A", ttl=60)
    expect(await child() == "busy", f"while its parent is busy, a subgraph's namespace reads {await child()!r}")
    listed = {f"{t.namespace}/{t.thread_id}": t.status for t in await cp.alist_threads()}
    same("a listing while the parent is busy", listed, {"/p": "busy", "sub:t1/p": "busy", "sub:t2/q": "ready"})
    same(
        "status='busy' lists the parent and its subgraph's namespace",
        sorted(f"{t.namespace}/{t.thread_id}" for t in await cp.alist_threads(status="busy")),
        ["/p", "sub:t1/p"],
    )
    same(
        "status='ready' leaves out a namespace whose parent is busy",
        [f"{t.namespace}/{t.thread_id}" for t in await cp.alist_threads(status="ready")],
        ["sub:t2/q"],
    )
    await cp.arelease_lease(lease)
    expect(await child() == "ready", f"once the parent's lease is given back the namespace reads {await child()!r}")
