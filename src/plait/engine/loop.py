"""The super-step loop: the thin async driver around planning, running and merging.

Per super-step: run the planned tasks concurrently, merge all writes through the reducers in
planned task order, plan the next tasks, commit one checkpoint, advance. Planning and merging
are pure (``plan``, ``merge``); when a checkpoint reaches the store is the durability
strategy's, the lease the ThreadLease's, the stream the Emitter's; all storage goes through
the Committer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, Fence, PendingWrite, RestStatus, Task, WritesBatch, new_checkpoint_id
from plait.engine.commit import Committer
from plait.engine.context import NodeContext
from plait.engine.durability import Durable, durability_for
from plait.engine.emitter import Emitter, Sink
from plait.engine.events import NodeStarted, RunFinished
from plait.engine.executor import NodeExecutor
from plait.engine.lease import ThreadLease, renews_off_loop
from plait.engine.merge import (
    Results,
    StepInputs,
    checkpoint_metadata,
    error_write,
    merge_step,
    read_pending,
    written_keys,
)
from plait.engine.pending import goto_tasks, incompatibilities, result_write, resume_writes
from plait.engine.plan import bare_checkpoint, hold_deferred, plan_next, with_held
from plait.engine.spec import GraphSpec
from plait.engine.subgraph import renamed_tasks
from plait.engine.tasks import StateView, TaskOutcome, compute_routes, run_all, run_task
from plait.errors import (
    CheckpointNotFoundError,
    GraphChangedError,
    InvalidResumeError,
    PlaitError,
    RecursionLimitError,
)
from plait.state.reducers import LastWriteWins
from plait.state.run_state import RunState
from plait.types import START, Command, Durability, Interrupt

__all__ = ["Run", "RunResult", "Sink"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    values: dict[str, Any]
    interrupts: tuple[Interrupt, ...]
    status: Literal["done", "interrupted"]
    checkpoint_id: str | None
    step: int


class _Stop(Exception):
    def __init__(self, result: RunResult) -> None:
        self.result = result


class Run:
    """One ``invoke``: owns the run state, the committer and the lease for its duration."""

    def __init__(
        self,
        spec: GraphSpec,
        checkpointer: Checkpointer | None,
        *,
        graph_fp: str,
        thread_id: str | None,
        namespace: str,
        durability: Durability,
        recursion_limit: int,
        interrupt_before: frozenset[str],
        interrupt_after: frozenset[str],
        sink: Sink | None = None,
        modes: frozenset[str] = frozenset(),
        wait: float | None = None,
        owner: str | None = None,
        executor: NodeExecutor | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        if durability not in ("sync", "async", "exit"):
            raise ValueError(f"durability must be 'sync', 'async' or 'exit', got {durability!r}")
        if recursion_limit < 1:
            raise ValueError("recursion_limit must be at least 1")
        if wait is not None and wait < 0:
            raise ValueError("wait must be a number of seconds (0 or more), or None not to wait")
        self.spec = spec
        self.checkpointer = checkpointer
        self.graph_fp = graph_fp
        self.thread_id = thread_id
        self.namespace = namespace
        self.recursion_limit = recursion_limit
        self.durability: Durability = durability
        self.before = interrupt_before
        self.after = interrupt_after
        self.wait = wait
        self.executor = executor
        """Where sync nodes run (None: the process's shared pool)."""
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1 (or None for no cap)")
        # The caller's per-run values (``ctx.context``, never stored), the metadata= recorded
        # on every checkpoint of the run, and how many tasks of a step may run at once.
        self.context, self.max_concurrency = context, max_concurrency
        self.user_metadata = dict(metadata) if metadata else None
        self.run_id = uuid.uuid4().hex[:16]
        self.owner = (
            owner or f"{socket.gethostname()}:{os.getpid()}:{self.run_id}"
        )  # host:pid (a forked child names itself)
        """The run's lease owner (a worker may give its own): who the thread's lease names."""
        self.loop = asyncio.get_running_loop()
        self.emit = Emitter(sink, modes, self.loop)
        self.committer = (
            Committer(checkpointer, self.emit.committed if self.emit.events else None)
            if checkpointer is not None
            else None
        )
        self.store: Durable | None = None if self.committer is None else durability_for(durability, self.committer)
        self.hold: ThreadLease | None = None
        """The run's lease on its thread, while it runs (None without a checkpointer)."""
        self.durable = checkpointer is not None
        self.state = RunState(spec.schema)
        self.state.writers = spec.writers
        self._lww = frozenset(c.key for c in spec.schema if isinstance(c.reducer, LastWriteWins))
        self._with_writes: set[str] = set()
        """Checkpoints this run stored pending writes for and no child has folded yet: a
        child folds its parent's writes (deletes them in its commit) only when there may be
        some, so that a plain step's commit skips that statement."""
        self._inline_ok = renews_off_loop(checkpointer)
        if self.committer is not None:
            self.committer.guard = self._check_lease

    # -- the TaskHost protocol -----------------------------------------------------------

    def emit_custom(self, node: str, step: int, payload: Any) -> None:
        self.emit.custom(node, step, payload)

    async def confirm_lease(self) -> None:
        """Check with the store that the run's lease is still the thread's current one, right
        before a side effect runs (see :meth:`ThreadLease.confirm`).

        Raises:
            LeaseLostError: the lease was lost (the run stops at once).
        """
        if self.hold is not None:
            await self.hold.confirm()

    async def record_effect(self, task_id: str, name: str, value: Any) -> None:
        assert self.committer is not None and self.store is not None
        await self.store.persist_current()
        self.committer.submit(writes=self._batch([PendingWrite(task_id=task_id, kind="effect", key=name, value=value)]))
        await self.committer.drain()

    # -- entry point ---------------------------------------------------------------------

    async def execute(self, input: Any, checkpoint_id: str | None) -> RunResult:
        if self.checkpointer is None or self.thread_id is None:
            return await self._outcome(input, checkpoint_id, None)
        async with ThreadLease(
            self.checkpointer,
            self.thread_id,
            self.owner,
            namespace=self.namespace,
            checkpoint_id=checkpoint_id,
            wait=self.wait,
        ) as hold:
            self.hold = hold
            assert self.committer is not None and hold.lease is not None
            self.committer.fence = Fence(owner=self.owner, token=hold.lease.token)
            try:
                return await self._outcome(input, checkpoint_id, hold.head)
            finally:
                hold.stop_renewing()
                hold.released = self.committer.released
                if self.store is not None:
                    hold.rest = self.store.rest

    async def execute_inside(self, input: Any, head: Checkpoint | None, hold: Any, fence: Fence) -> RunResult:
        """Run as a subgraph of another run (see :mod:`plait.engine.subgraph`): from ``head``
        (read by the caller) under the parent's lease ``hold`` (borrowed: never renewed or
        given back here), every commit fenced by ``fence`` (the parent's lease token)."""
        self.hold = hold
        assert self.committer is not None
        self.committer.fence = fence
        return await self._outcome(input, None, head)

    async def _outcome(self, input: Any, checkpoint_id: str | None, head: Checkpoint | None) -> RunResult:
        """Run to the end, then wait for the commits (every outcome is durable on return)."""
        try:
            try:
                result = await self._execute(input, checkpoint_id, head)
            except _Stop as stop:
                result = stop.result
            if self.committer is not None:
                await self.committer.drain()
            self.emit.event(RunFinished(thread_id=self.thread_id, step=result.step, status=result.status))
            return result
        except BaseException:
            if self.committer is not None:
                with contextlib.suppress(BaseException):  # the original failure is the one to report
                    await self.committer.drain()
            self.emit.event(RunFinished(thread_id=self.thread_id, step=self.state.super_step, status="failed"))
            raise

    def _check_lease(self) -> None:
        """Refuse to go on once the lease is lost: another run may own the thread now."""
        if self.hold is not None:
            self.hold.check()

    async def _execute(self, input: Any, checkpoint_id: str | None, head: Checkpoint | None) -> RunResult:
        if head is None and checkpoint_id is not None and self.checkpointer is not None and self.thread_id is not None:
            raise CheckpointNotFoundError(self.thread_id, checkpoint_id, self.namespace)
        if head is not None:
            await self._check_compatible(head)
            self.state = RunState.restored(
                self.spec.schema, head.values, head.versions, version=head.version, super_step=head.step
            )
            self.state.writers = self.spec.writers
            if self.store is not None:
                self.store.started_from(head)
        pending = list(head.pending_writes) if head is not None else []
        if head is not None and checkpoint_id is not None and not isinstance(input, Mapping):
            head, pending = await self._branch(head, pending)
        if isinstance(input, Command):
            if head is None:
                raise InvalidResumeError(self.thread_id, "the thread has no checkpoint to resume")
            cur = head
            if input.update is not None or input.goto:
                cur, pending = await self._apply_update(cur, pending, input.update, input.goto)
            if input.has_resume:
                pending = await self._apply_resume(cur, pending, input.resume)
            return await self._loop(cur, cur.next_tasks, pending)
        if input is None:
            if head is None:
                raise CheckpointNotFoundError(self.thread_id or "(no thread_id)", None, self.namespace)
            return await self._loop(head, head.next_tasks, pending)
        cur, tasks = await self._start(head, input)
        return await self._loop(cur, tasks, [])

    # -- starting ------------------------------------------------------------------------

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
        if not isinstance(input, Mapping):
            raise TypeError(f"invoke() takes a mapping of channel values, None (to resume) or a Command, got {input!r}")
        st = self.state
        cid = new_checkpoint_id(after=head.id if head else None)  # names the input's messages
        changed = st.fold(st.values, self.spec.schema.prepare(input, "input", cid), "input")
        if changed:
            st.apply(changed, "input")
        step = head.step + 1 if head is not None else 0
        st.super_step = step
        routes = await compute_routes(self.spec, START, st, st.values, [], None)
        tasks, _ = plan_next(self.spec, cid, [(Task(id="", node=START), routes)], {})
        cp = self._checkpoint(
            cid, head.id if head else None, step, tasks, {}, "input", {"input": sorted(changed)}
        )  # a new run starts with no join half-way
        self._emit_values()
        self._store(cp, set(changed))
        await self._sync_point()
        return cp, tasks

    async def _branch(self, start: Checkpoint, pending: list[PendingWrite]) -> tuple[Checkpoint, list[PendingWrite]]:
        """A run from a checkpoint of the past (time travel) starts with a copy of it as the
        thread's new head (source ``replay``, the same step, its pending writes carried), so
        that the branch it starts is the thread's from the first step: an interrupt or a
        failure there is what ``get_state`` shows and what ``Command(resume=...)`` answers."""
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
        changed = st.fold(st.values, self.spec.schema.prepare(update or {}, "update", cid), "update")
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

    # -- the loop ------------------------------------------------------------------------

    async def _loop(self, cur: Checkpoint, tasks: Sequence[Task], pending: list[PendingWrite]) -> RunResult:
        steps = 0
        while tasks:
            if steps >= self.recursion_limit:
                error = RecursionLimitError(self.recursion_limit, self.thread_id)
                await self._save_pending(cur, [error_write("", "", cur.step, error)], status="error")
                raise error
            cur, tasks = await self._step(cur, tasks, pending)
            pending = []
            steps += 1
        if self.store is not None:
            await self.store.persist_current(cur)
        return self._result(cur, (), "done")

    async def _step(
        self, cur: Checkpoint, tasks: Sequence[Task], pending: list[PendingWrite]
    ) -> tuple[Checkpoint, tuple[Task, ...]]:
        """One super-step: run what is not done yet, stop on a failure or an interrupt, merge,
        plan, checkpoint."""
        hold = self.hold
        if hold is not None and hold.error is not None:
            raise hold.error
        tasks, held = hold_deferred(self.spec, tasks) if self.spec.defers else (tasks, ())
        inputs = read_pending(pending, self.spec.schema) if pending else StepInputs()
        results = inputs.results
        to_run = [t for t in tasks if t.id not in results]
        if self.before and not inputs.breakpoint_taken and any(t.node in self.before for t in to_run):
            await self._pause(cur, [PendingWrite(task_id="", kind="breakpoint")], ())
        base = self.state.table  # the live table: nothing changes it until the merge
        outcomes = await self._run_tasks(cur, to_run, inputs, results, base)
        if hold is not None and hold.error is not None:  # a node's effect found the lease lost, or the renewer did
            raise hold.error
        for o in outcomes:
            if o.error is not None or o.interrupt is not None:
                await self._stop_if_failed_or_paused(cur, to_run, outcomes)
        folded = outcomes[0].folded if len(tasks) == 1 and len(outcomes) == 1 else None
        try:
            changed = merge_step(self.state, tasks, results, base, cur.step, self._lww, folded)
        except PlaitError as error:
            saved = [result_write(t.id, TaskOutcome(writes=results[t.id][0], routes=results[t.id][1])) for t in to_run]
            await self._save_pending(
                cur, [*(saved if len(to_run) > 1 else []), error_write("", "", cur.step, error)], status="error"
            )
            raise
        st = self.state
        if changed:
            st.apply(changed, None)
            if self.emit.events:
                self.emit.state_updated(tasks, results, st.version, cur.step)
        st.advance()
        new, next_tasks = await self._next_checkpoint(cur, tasks, results, changed, bool(pending), held)
        self._emit_values()
        if self.after and next_tasks and any(t.node in self.after for t in tasks):
            await self._pause(new, [PendingWrite(task_id="", kind="breakpoint", key="after")], ())
        return new, next_tasks

    async def _run_tasks(
        self, cur: Checkpoint, to_run: Sequence[Task], inputs: Any, results: Results, base: Mapping[str, Any]
    ) -> list[TaskOutcome]:
        """Run a step's tasks concurrently, each finished one's writes kept in ``results``
        (and saved as a pending write when the step has several, in the modes that do)."""
        step = cur.step
        view = StateView(base, self.spec)
        multi = len(to_run) > 1
        # A lone sync node runs inline on the loop when the lease is renewed off the loop
        # (always, for plait's own backends); otherwise it runs in a worker thread so that a
        # slow node (an LLM call) cannot starve the lease renewal.
        inline = not multi and self._inline_ok
        flush = multi and self.store is not None and self.store.flushes_results
        emit = self.emit

        async def one(task: Task) -> TaskOutcome:
            if self.hold is not None and self.hold.error is not None:  # lost while siblings ran
                return TaskOutcome(error=self.hold.error)
            ctx = NodeContext(
                thread_id=self.thread_id,
                namespace=self.namespace,
                checkpoint_id=cur.id,
                step=step,
                node=task.node,
                task_id=task.id,
                host=self,
                resume_values=inputs.resume.get(task.id, []),
                effects=inputs.effects.get(task.id, {}),
                context=self.context,
            )
            if emit.active:
                emit.event(NodeStarted(node=task.node, task_id=task.id, step=step))
            node = self.spec.nodes[task.node]
            arg = task.arg if task.send else view
            out = await run_task(
                self.spec,
                node,
                arg,
                ctx,
                self.state,
                base,
                inline=inline,
                on_retry=emit.retry_hook(task, step) if emit.events else None,
                executor=self.executor,
            )
            if out.error is None and out.interrupt is None:
                results[task.id] = (out.writes, out.routes)
                if flush:
                    assert self.committer is not None
                    self.committer.submit(writes=self._batch([result_write(task.id, out)], cur.id))
                if emit.active:
                    emit.task_done(task, out, step)
            return out

        if not multi:
            return [await one(to_run[0])] if to_run else []
        return await run_all((one(t) for t in to_run), limit=self.max_concurrency)

    async def _stop_if_failed_or_paused(
        self, cur: Checkpoint, to_run: Sequence[Task], outcomes: Sequence[TaskOutcome]
    ) -> None:
        """A step with a failed or interrupted task stops the run: the finished tasks'
        results, the interrupts and the errors are saved on the step's checkpoint."""
        errors = [o.error for o in outcomes if o.error is not None]
        interrupts = tuple(o.interrupt for o in outcomes if o.interrupt is not None)
        if not (errors or interrupts):
            return
        pairs = list(zip(to_run, outcomes, strict=True))
        saved = [result_write(t.id, o) for t, o in pairs if o.error is None and o.interrupt is None]
        saved += [
            PendingWrite(task_id=i.task_id, kind="interrupt", key=str(i.index), value=i.to_json()) for i in interrupts
        ]
        if errors:
            saved += [error_write(t.id, t.node, cur.step, o.error) for t, o in pairs if o.error is not None]
            await self._save_pending(cur, saved, status="error")
            raise errors[0]
        await self._pause(cur, saved, interrupts)

    async def _next_checkpoint(
        self,
        cur: Checkpoint,
        tasks: Sequence[Task],
        results: Results,
        changed: Mapping[str, Any],
        resumed: bool,
        held: tuple[Task, ...],
    ) -> tuple[Checkpoint, tuple[Task, ...]]:
        """Plan the next tasks (plus the deferred ones ``held`` back) and store the checkpoint."""
        store = self.store
        cid = new_checkpoint_id(after=cur.id) if store is not None else f"{self.run_id}.{cur.step + 1}"
        next_tasks, barriers = plan_next(self.spec, cid, [(t, results[t.id][1]) for t in tasks], cur.barriers)
        if held:
            next_tasks = with_held(next_tasks, held)
        if store is None:
            return bare_checkpoint(cid, cur, next_tasks, barriers), next_tasks
        new = self._checkpoint(
            cid, store.parent_for_next(cur), cur.step + 1, next_tasks, barriers, "loop", written_keys(tasks, results)
        )
        parent = new.parent_id
        folds = resumed or parent in self._with_writes
        self._with_writes.discard(parent)
        if not next_tasks:
            # The run's last checkpoint gives the lease back in its own commit (a round
            # trip fewer per run, in every durability mode).
            self._finishing("idle")
        await store.store_step(new, set(changed), folds=folds)
        return new, next_tasks

    # -- persistence ---------------------------------------------------------------------

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
        return Checkpoint(
            thread_id=self.thread_id or "",
            namespace=self.namespace,
            id=cid,
            parent_id=parent,
            step=step,
            values=dict(st.table),
            versions=st.channel_versions,  # a copy already
            next_tasks=tuple(tasks),
            barriers=dict(barriers),
            metadata=checkpoint_metadata(
                source,
                step,
                self.spec,
                self.graph_fp,
                writes=writes,
                run_id=self.run_id,
                user=self.user_metadata,
                **extra,
            ),
            created_at=time.time(),
        )

    def _store(self, cp: Checkpoint, changed: set[str]) -> None:
        if self.store is not None:
            self.store.store(cp, changed, folds=False)

    async def _sync_point(self) -> None:
        if self.store is not None:
            await self.store.sync_point()

    def _finishing(self, status: RestStatus) -> None:
        """The next commit is the run's last: it gives the lease back, leaving the thread
        ``status``. Renewals stop first, so that none can land after the release."""
        if self.hold is not None:
            self.hold.stop_renewing()
        if self.committer is not None:
            self.committer.release_on_next(status)

    async def _save_pending(self, cur: Checkpoint, writes: Sequence[PendingWrite], *, status: RestStatus) -> None:
        """Store what the step produced so far on the checkpoint it started from (stored
        first, if exit durability skipped it), and wait until it is durable: the run stops
        here (``status`` says how), and a resume must find these results. The same commit
        gives the lease back."""
        if self.committer is None or self.store is None:
            return
        self._check_lease()
        self._finishing(status)
        await self.store.persist_current(cur)
        self.store.rest = status
        if writes:
            self.committer.submit(writes=self._batch(writes, cur.id))
        await self.committer.drain()

    async def _pause(self, cur: Checkpoint, writes: list[PendingWrite], interrupts: tuple[Interrupt, ...]) -> None:
        await self._save_pending(cur, writes, status="interrupted")
        self.emit.interrupted(interrupts, cur.step)
        raise _Stop(self._result(cur, interrupts, "interrupted"))

    def _batch(self, writes: Sequence[PendingWrite], checkpoint_id: str | None = None) -> WritesBatch:
        cid = checkpoint_id or (self.store.persisted_id if self.store is not None else None) or ""
        self._with_writes.add(cid)
        return WritesBatch(
            thread_id=self.thread_id or "", namespace=self.namespace, checkpoint_id=cid, writes=tuple(writes)
        )

    def _result(
        self, cur: Checkpoint, interrupts: tuple[Interrupt, ...], status: Literal["done", "interrupted"]
    ) -> RunResult:
        return RunResult(
            values=dict(self.state.table),
            interrupts=interrupts,
            status=status,
            checkpoint_id=cur.id if self.checkpointer is not None else None,
            step=cur.step,
        )

    def _emit_values(self) -> None:
        if self.emit.sink is not None:
            self.emit.values(self.state.table)
