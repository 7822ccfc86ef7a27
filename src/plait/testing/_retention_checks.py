"""Checks of retention: a sweep removes what its policy says and never breaks a thread.

They run real graphs on the checkpointer (a thread paused on several interrupts at once, a
thread with a time-travel branch, a finished one), sweep ahead of time with ``asweep(at=...)``
(no waiting), then read, resume and answer every thread that remains.
"""

from __future__ import annotations

from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.retention import Retention
from plait.engine.context import interrupt
from plait.graph import CompiledGraph, Graph
from plait.state import AppendList, StateSchema
from plait.testing._harness import Checks, Env, expect, same
from plait.types import END, START, Command

check = Checks()

_LATER = 10_000.0
"""Seconds ahead of now the checks sweep at: well past their policies' ``after``."""


def _app(cp: Checkpointer) -> CompiledGraph:
    """start -> (x, y: each asks) -> done: a run pauses on two interrupts at once."""

    def asker(name: str) -> Any:
        def node(state: Any) -> dict[str, Any]:
            return {"log": [f"{name}={interrupt(name + '?')}"]}

        return node

    g = Graph(StateSchema.builder().add("log", AppendList()).build())
    g.add_node("start", lambda s: {"log": ["start"]}).add_node("x", asker("x")).add_node("y", asker("y"))
    g.add_node("done", lambda s: {"log": ["done"]})
    g.add_edge(START, "start").add_edge("start", "x").add_edge("start", "y").add_edge(["x", "y"], "done")
    g.add_edge("done", END)
    return g.compile(cp)


async def _answer_all(app: CompiledGraph, thread_id: str, **metadata: Any) -> dict[str, Any]:
    """Answer every interrupt the thread waits on (by id), and return the run's result."""
    state = await app.aget_state(thread_id)
    by_node = {i.node: i.id for i in state.interrupts}
    same(f"the interrupts thread {thread_id!r} waits on", sorted(by_node), ["x", "y"])
    answers = Command(resume={by_node["x"]: 1, by_node["y"]: 2})
    return dict(await app.ainvoke(answers, thread_id=thread_id, metadata=metadata or None))


async def _paused_with_branch(app: CompiledGraph, thread_id: str, **metadata: Any) -> None:
    """A thread paused on two interrupts, after a time-travel branch from its first step."""
    await app.ainvoke({}, thread_id=thread_id, metadata=metadata or None)
    first = (await app.aget_state_history(thread_id))[-1]
    await app.ainvoke(None, thread_id=thread_id, checkpoint_id=first.checkpoint_id, metadata=metadata or None)


async def _trees(cp: Checkpointer) -> dict[tuple[str, str], dict[str, str | None]]:
    return {
        (t.namespace, t.thread_id): await cp.atree(t.thread_id, namespace=t.namespace) for t in await cp.alist_threads()
    }


@check("retention_keep_latest_resumes")
async def _keep_latest(env: Env) -> None:
    """keep_latest leaves each thread its head alone, branches gone, and every thread still
    reads back, resumes and answers its interrupts (several pending at once)."""
    cp = await env.new()
    app = _app(cp)
    await _paused_with_branch(app, "paused")
    await _paused_with_branch(app, "finished")
    await _answer_all(app, "finished")
    before = {t: (await app.aget_state(t)).values for t in ("paused", "finished")}
    cp.set_retention(Retention(after=60, action="keep_latest", keep_interrupted=False))
    report = await cp.asweep(at=cp.store_time() + _LATER)
    same("the threads reduced", sorted(report.reduced), [("", "finished"), ("", "paused")])
    same("the threads deleted", report.deleted, ())
    for tid in ("paused", "finished"):
        tree = await cp.atree(tid)
        same(f"checkpoints of {tid!r} after keep_latest", len(tree), 1)
        same(f"the values of {tid!r} after the sweep", (await app.aget_state(tid)).values, before[tid])
    out = await _answer_all(app, "paused")
    same("the paused thread's run after the sweep", out["log"], ["start", "x=1", "y=2", "done"])
    again = await app.ainvoke({}, thread_id="finished")
    same(
        "a finished thread's next run after the sweep",
        (again["log"], len(again["__interrupt__"])),
        (["start", "x=1", "y=2", "done", "start"], 2),
    )


@check("retention_delete_skips_busy_never_and_interrupted")
async def _delete(env: Env) -> None:
    """delete removes idle threads only: a busy thread (skipped, reported), one whose
    metadata says "never", and one waiting on interrupts (keep_interrupted) stay whole; a
    dry run first reports the same and changes nothing."""
    cp = await env.new()
    app = _app(cp)
    await _paused_with_branch(app, "old")
    await _answer_all(app, "old")
    await _paused_with_branch(app, "never", retention="never")
    await _answer_all(app, "never", retention="never")
    await _paused_with_branch(app, "waiting")
    await _paused_with_branch(app, "busy")
    await _answer_all(app, "busy")
    lease = await cp.atake_lease("busy", "a run", ttl=_LATER * 10)
    cp.set_retention(Retention(after=60))
    at = cp.store_time() + _LATER
    trees = await _trees(cp)
    dry = await cp.asweep(dry_run=True, at=at)
    same("a dry run changes nothing", await _trees(cp), trees)
    expect(dry.dry_run and dry.bytes_freed is None, f"a dry run's report says so: {dry!r}")
    none = await cp.asweep(at=cp.store_time())
    same("a sweep before any thread is old enough", (none.deleted, none.reduced), ((), ()))
    report = await cp.asweep(at=at)
    same("the threads deleted", report.deleted, (("", "old"),))
    same("the busy threads skipped", report.skipped_busy, (("", "busy"),))
    same("the dry run's deletions", dry.deleted, report.deleted)
    same("the dry run's count of checkpoints", dry.checkpoints_removed, report.checkpoints_removed)
    expect(report.checkpoints_removed == len(trees[("", "old")]), f"every checkpoint of 'old' counted: {report!r}")
    same("what remains", sorted(tid for _, tid in await _trees(cp)), ["busy", "never", "waiting"])
    await cp.arelease_lease(lease)
    out = await _answer_all(app, "waiting")
    same("the interrupted thread's run after the sweep", out["log"], ["start", "x=1", "y=2", "done"])
    own = await cp.asweep(at=at)
    same("a thread's own policy wins: 'never' stays", sorted(tid for _, tid in own.deleted), ["busy", "waiting"])


@check("retention_thread_policy_wins")
async def _thread_policy(env: Env) -> None:
    """A thread's own policy (its "retention" metadata) applies without a store policy, and
    a sweep without either removes nothing."""
    cp = await env.new()
    app = _app(cp)
    await _paused_with_branch(app, "own", retention={"after": 60, "action": "keep_latest", "keep_interrupted": False})
    await _paused_with_branch(app, "plain")
    at = cp.store_time() + _LATER
    report = await cp.asweep(at=at)
    same("the threads reduced by their own policy", report.reduced, (("", "own"),))
    same("checkpoints of the thread with no policy", len(await cp.atree("plain")) > 1, True)
    out = await _answer_all(app, "own")
    same("the reduced thread's run", out["log"], ["start", "x=1", "y=2", "done"])


@check("retention_policy_lasts_and_is_stored")
async def _lasting_and_stored(env: Env) -> None:
    """A thread's own policy given on one run lasts over later runs that name none; a policy
    stored in the database (read back as stored, cleared) applies below the checkpointer's
    own ``retention=``, and a thread's own wins over both."""
    cp = await env.new()
    app = _app(cp)
    await _paused_with_branch(app, "own", retention="never")
    await _answer_all(app, "own")  # a later run, with no policy of its own
    await _paused_with_branch(app, "plain")
    await _answer_all(app, "plain")
    stored = Retention(after=60, action="keep_latest", keep_interrupted=False)
    await cp.aset_stored_retention(stored)
    same("the stored policy read back", await cp.aget_stored_retention(), stored)
    at = cp.store_time() + _LATER
    cp.set_retention(Retention(after=_LATER * 10))
    same("the checkpointer's policy wins over the stored one", (await cp.asweep(at=at)).reduced, ())
    cp.set_retention(None)
    report = await cp.asweep(at=at)
    same("the stored policy applies; 'never', given once, still holds", report.reduced, (("", "plain"),))
    same("the policy a sweep reports", report.policy, stored)
    await cp.aclear_stored_retention()
    same("the stored policy after clearing it", await cp.aget_stored_retention(), None)
