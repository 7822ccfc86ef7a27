"""How a run starts, and how it makes and stores its checkpoints: the half of the driver that
turns an input, a ``Command`` or a point of the past into the checkpoint the loop goes on from.

:class:`Starting` is the driver's base class (:class:`~plait.engine.loop.Driver` adds the
super-step loop); it holds no state of its own, only the methods over the driver's fields
declared below, so that each module keeps to one job.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import (
    Checkpoint,
    PendingWrite,
    Task,
    WritesBatch,
    make_checkpoint,
    new_checkpoint_id,
    waiting_interrupts,
)
from plait.engine.commit import Committer
from plait.engine.durability import Durable
from plait.engine.emitter import Emitter
from plait.engine.merge import checkpoint_metadata
from plait.engine.options import RunHooks, RunOptions, RunResult
from plait.engine.pending import goto_tasks, incompatibilities, resume_writes
from plait.engine.plan import plan_next, renamed_tasks
from plait.engine.spec import GraphSpec
from plait.engine.tasks import compute_routes
from plait.errors import GraphChangedError, InvalidResumeError
from plait.state.managed import managed_values
from plait.state.run_state import RunState
from plait.tracing.hooks import RunInfo, RunTrace, Tracer
from plait.types import START, Command, Durability

__all__ = ["Starting"]


class Starting:
    """Starting a run and making its checkpoints (the fields are the driver's)."""

    spec: GraphSpec
    graph_fp: str
    options: RunOptions
    checkpointer: Checkpointer | None
    thread_id: str | None
    namespace: str
    run_id: str
    state: RunState
    emit: Emitter
    committer: Committer | None
    persist: Durable | None
    _with_writes: set[str]
    hooks: RunHooks | None
    hold: Any
    """The run's :class:`~plait.engine.lease.ThreadLease` (None: no lease; a subgraph's: its parent's)."""
    trace: RunTrace | None
    name: str
    durability: Durability
    path: tuple[str, ...]
    carry: Mapping[str, Any] | None = None
    """The metadata of the thread's head when the run started: what its checkpoints carry on
    (see :data:`~plait.engine.merge.CARRIED_KEYS`)."""

    def _managed(self, steps_done: int) -> dict[str, Any]:
        """The values of the state's managed fields (``RemainingSteps``, ``IsLastStep``) in
        the step after ``steps_done`` steps of this run (-1: the input's routers)."""
        return managed_values(self.spec.managed, self.options.recursion_limit, steps_done)

    async def _traced(
        self,
        tracer: Tracer,
        input: Any,
        head: Checkpoint | None,
        start_from: str | None,
        benign: tuple[type[BaseException], ...],
        work: Coroutine[Any, Any, RunResult],
    ) -> RunResult:
        """Run ``work`` (the run, to its end) inside the run's span: a run that continues a
        paused thread (no new input) links to the run that paused it; the committer reports
        each commit to the span. ``benign``: what ends a step without failing it."""
        top = not self.path
        resumed = head is not None and not isinstance(input, Mapping)
        lease = getattr(self.hold, "lease", None)
        trace = self.trace = tracer.run(
            RunInfo(
                thread_id=self.thread_id,
                namespace=self.namespace,
                run_id=self.run_id,
                durability=self.durability,
                graph=self.name,
                top=top,
                link=head.metadata.get("trace") if resumed and head is not None else None,
                resumed=resumed,
                benign=benign,
                retries=self.hooks.trace_links if top and self.hooks is not None else (),
                start_from=start_from if top else None,
                replay=input is None,
                lease=(lease.owner, lease.token) if top and lease is not None else None,
                version=self.spec.lineage.version if self.spec.lineage is not None else None,
            )
        )
        if self.committer is not None:
            report = self.committer.on_commit

            def committed(checkpoints: Sequence[Any]) -> None:
                trace.committed(checkpoints)
                if report is not None:
                    report(checkpoints)

            self.committer.on_commit = committed
        try:
            if trace.stamp is not None and self.hooks is not None:
                try:
                    await self.hooks.on_trace(trace.stamp)
                except BaseException:
                    work.close()
                    raise
            result = await work
        except BaseException as error:
            trace.failed(error)
            raise
        trace.finished(result.status, result.checkpoint_id, result.step)
        return result

    async def _check_compatible(self, head: Checkpoint) -> None:
        if head.metadata.get("graph") in (None, self.graph_fp):
            return
        reducers = head.metadata.get("reducers")
        if reducers is None and self.checkpointer is not None and self.thread_id is not None:
            for cp in await self.checkpointer.ahistory(self.thread_id, namespace=self.namespace):
                if "reducers" in cp.metadata:
                    reducers = cp.metadata["reducers"]
                    break
        changes = incompatibilities(self.spec, head, reducers)
        if changes:
            raise GraphChangedError(self.thread_id or "", changes)

    async def _start(self, head: Checkpoint | None, input: Any) -> tuple[Checkpoint, tuple[Task, ...]]:
        model = self.spec.schema.model
        if not isinstance(input, Mapping) and not (model is not None and model.owns(input)):
            raise TypeError(f"invoke() takes a mapping of channel values, None (to resume) or a Command, got {input!r}")
        st = self.state
        if head is None and self.hooks is not None and self.hooks.root:
            head = self._checkpoint(new_checkpoint_id(), None, 0, (), {}, "update", {"update": []})
            self._store(head, set())  # no sync point: it goes in the input's commit
        cid = new_checkpoint_id(after=head.id if head else None)  # names the input's messages
        if self.spec.managed:  # computed each step, never stored: an input's value is dropped, as in LangGraph
            input = {k: v for k, v in input.items() if k not in self.spec.managed}
        changed = st.fold(st.values, self.spec.schema.prepare(input, "input", cid, st.values), "input")
        if changed:
            st.apply(changed, "input")
        step = head.step + 1 if head is not None else 0
        st.super_step = step
        seen = st.values if not self.spec.managed else {**st.values, **self._managed(-1)}
        routes = await compute_routes(self.spec, START, st, seen, [], None)
        tasks, _ = plan_next(self.spec, cid, [(Task(id="", node=START), routes)], {})
        cp = self._checkpoint(
            cid, head.id if head else None, step, tasks, {}, "input", {"input": sorted(changed)}
        )  # a new run starts with no join half-way
        self._emit_values()
        self._store(cp, set(changed))
        await self._sync_point()
        return cp, tasks

    async def _branch(
        self, start: Checkpoint, pending: list[PendingWrite], input: Any = None
    ) -> tuple[Checkpoint, list[PendingWrite]]:
        """A run from a checkpoint of the past (time travel) starts with a copy of it as the
        thread's new head (source ``replay``, the same step, its pending writes carried), so
        that the branch it starts is the thread's from the first step: an interrupt or a
        failure there is what ``get_state`` shows and what ``Command(resume=...)`` answers.

        Raises:
            InvalidResumeError: ``input`` resumes, and ``start`` waits on no interrupt (before
                anything is stored: a refused call leaves the thread as it was).
        """
        if isinstance(input, Command) and input.has_resume and not waiting_interrupts(pending):
            raise InvalidResumeError(
                self.thread_id,
                f"checkpoint {start.id} waits on no interrupt, so there is nothing there to resume. If a replay "
                "from it paused, it paused on the copy of it the replay stored as the thread's head (source "
                "'replay'): answer that one, invoke(Command(resume=...), thread_id=...) without checkpoint_id",
            )
        cid = new_checkpoint_id(after=start.id)
        # With no result of the step saved, the branch's tasks get ids of their own, so that
        # a subgraph among them runs afresh rather than continuing the original task's run.
        tasks = start.next_tasks if pending else renamed_tasks(start.next_tasks, cid)
        cp = self._checkpoint(cid, start.id, start.step, tasks, start.barriers, "replay", None, replayed_from=start.id)
        self._store(cp, set())
        self._carry(cp, pending)
        await self._sync_point()
        return cp, pending

    def _carry(self, cp: Checkpoint, pending: Sequence[PendingWrite]) -> None:
        """Save ``pending`` (what the step of ``cp``'s parent produced so far) on ``cp``."""
        if pending and self.committer is not None:
            self._with_writes.add(cp.id)
            self.committer.submit(
                writes=WritesBatch(
                    thread_id=cp.thread_id, namespace=self.namespace, checkpoint_id=cp.id, writes=tuple(pending)
                )
            )

    async def _apply_update(
        self, cur: Checkpoint, pending: list[PendingWrite], update: Any, goto: Any = ()
    ) -> tuple[Checkpoint, list[PendingWrite]]:
        """A Command input's update as a checkpoint (source ``update``); with a ``goto``, its
        targets replace the thread's next tasks (and what their step had pending)."""
        st = self.state
        cid = new_checkpoint_id(after=cur.id)  # names the update's messages
        changed = st.fold(st.values, self.spec.schema.prepare(update or {}, "update", cid, st.values), "update")
        if changed:
            st.apply(changed, "update")
        tasks, barriers = goto_tasks(self.spec, cid, goto) if goto else (cur.next_tasks, cur.barriers)
        pending = [] if goto else pending
        cp = self._checkpoint(cid, cur.id, cur.step + 1, tasks, barriers, "update", {"update": sorted(changed)})
        self._store(cp, set(changed))
        self._carry(cp, pending)
        await self._sync_point()
        return cp, pending

    async def _apply_resume(self, cur: Checkpoint, pending: list[PendingWrite], resume: Any) -> list[PendingWrite]:
        new = resume_writes(self.thread_id, pending, resume)
        if self.committer is not None:
            self.committer.submit(writes=self._batch(new, cur.id))
            await self.committer.drain()
        answered = {n.task_id for n in new}
        return [p for p in pending if not (p.kind == "resume" and p.task_id in answered)] + new

    def _checkpoint(
        self,
        cid: str,
        parent: str | None,
        step: int,
        tasks: Sequence[Task],
        barriers: Mapping[str, tuple[str, ...]],
        source: str,
        writes: Mapping[str, list[str]] | None,
        **extra: Any,
    ) -> Checkpoint:
        st = self.state
        if self.trace is not None and self.trace.stamp is not None:
            extra["trace"] = self.trace.stamp
        return make_checkpoint(  # (the fields in order: see Checkpoint)
            self.thread_id or "",
            self.namespace,
            cid,
            parent,
            step,
            dict(st.table),
            st.channel_versions,  # a copy already
            tuple(tasks),
            dict(barriers),
            checkpoint_metadata(
                source,
                step,
                self.spec,
                self.graph_fp,
                writes=writes,
                run_id=self.run_id,
                user=self.options.metadata,
                carry=self.carry,
                **extra,
            ),
            time.time(),
            (),
        )

    def _store(self, cp: Checkpoint, changed: set[str]) -> None:
        if self.persist is not None:
            self.persist.store(cp, changed, folds=False)

    async def _sync_point(self) -> None:
        if self.persist is not None:
            await self.persist.sync_point()

    def _batch(self, writes: Sequence[PendingWrite], checkpoint_id: str | None = None) -> WritesBatch:
        cid = checkpoint_id or (self.persist.persisted_id if self.persist is not None else None) or ""
        self._with_writes.add(cid)
        return WritesBatch(
            thread_id=self.thread_id or "", namespace=self.namespace, checkpoint_id=cid, writes=tuple(writes)
        )

    def emit_update(self, name: str, payload: Any) -> None:
        """(The TaskHost protocol's: a ``plait.task`` call's ``updates`` item.)"""
        self.emit.update(name, payload)

    def _emit_values(self) -> None:
        if self.emit.sink is not None:
            self.emit.values(self.state.table)
