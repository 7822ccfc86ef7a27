"""The super-step loop: the thin async driver around planning, running and merging.

Per super-step: run the planned tasks concurrently, merge all writes through the reducers in planned
task order, plan the next tasks, commit one checkpoint, advance. Planning and merging are pure (``plan``,
``merge``); when a checkpoint reaches the store is the durability strategy's, the lease the
ThreadLease's, the stream the Emitter's; all storage goes through the Committer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from plait.checkpoint.model import Checkpoint, Fence, PendingWrite, RestStatus, Task, new_checkpoint_id
from plait.engine.commit import Committer
from plait.engine.context import ParentCommand, SubgraphScope
from plait.engine.durability import Durable, durability_for
from plait.engine.emitter import Emitter, MessageSource, NestedSink, Sink, with_hooks
from plait.engine.events import RunFinished
from plait.engine.lease import ThreadLease, renews_off_loop
from plait.engine.merge import (
    Results,
    error_write,
    merge_step,
    no_pending,
    read_pending,
    step_timings,
    written_keys,
)
from plait.engine.options import Binding, RunHooks, RunOptions, RunOutcome, RunResult
from plait.engine.pending import result_write
from plait.engine.plan import bare_checkpoint, hold_deferred, plan_next, with_held
from plait.engine.spec import GraphSpec, SubgraphRunner
from plait.engine.stepping import Stepping
from plait.engine.tasks import TaskOutcome
from plait.errors import (
    CheckpointNotFoundError,
    InvalidResumeError,
    PlaitError,
    RecursionLimitError,
)
from plait.state.reducers import LastWriteWins
from plait.state.run_state import RunState
from plait.store import MemoryWrite
from plait.tracing import graph_tracer
from plait.tracing import hooks as tracing
from plait.tracing.hooks import RunTrace
from plait.types import Command, Durability, Interrupt

__all__ = ["Driver"]


class _Stop(Exception):
    def __init__(self, result: RunResult) -> None:
        self.result = result


class Driver(Stepping):
    """One run of a graph (one ``invoke``): owns the run state, the committer and the lease
    for its duration. ``binding`` says where and how the graph runs, ``options`` what this
    call asked for; ``sink``/``modes`` are the caller's stream."""

    steps_done = 0  # super-steps this run took before the current one (RemainingSteps counts them)

    def __init__(
        self,
        spec: GraphSpec,
        graph_fp: str,
        binding: Binding,
        options: RunOptions,
        *,
        sink: Sink | None = None,
        modes: frozenset[str] = frozenset(),
        path: tuple[str, ...] = (),
        watch: RunHooks | None = None,
        name: str = "",
    ) -> None:
        self.spec = spec
        self.name = name
        """The compiled graph's name (for the traces; a subgraph's run has none)."""
        self.graph_fp = graph_fp
        self.binding = binding
        self.options = options
        self.checkpointer = checkpointer = binding.checkpointer
        self.thread_id = options.thread_id
        self.namespace = binding.namespace
        self.durability: Durability = options.durability
        self.before = binding.interrupt_before
        self.after = binding.interrupt_after
        self.hooks = binding.hooks
        self.run_id = uuid.uuid4().hex[:16]
        self.owner = (
            options.owner or f"{socket.gethostname()}:{os.getpid()}:{self.run_id}"
        )  # host:pid (a forked child names itself)
        """The run's lease owner (a worker may give its own): who the thread's lease names."""
        self.loop = asyncio.get_running_loop()
        self.caller_sink, self.caller_modes = sink, modes
        """The caller's own stream (a subgraph's items go to its child, never to the hooks)."""
        self.watch = self.hooks if self.hooks is not None and self.hooks.subgraphs else watch
        """The top-level run's hooks when they want its subgraphs' items (for its subgraphs)."""
        if self.hooks is not None and self.hooks.modes:
            sink, modes = with_hooks(sink, modes, self.hooks.on_item, self.hooks.modes)
        elif watch is not None and watch.modes:
            sink, modes = with_hooks(sink, modes, functools.partial(watch.on_subgraph_item, path), watch.modes)
        self.path = path
        """The ``node:task_id`` segments from the top-level run to this one (``()`` there)."""
        source = None
        if sink is not None and "messages" in modes:
            source = MessageSource(
                thread_id=self.thread_id,
                namespace=self.namespace,
                path=path,
                metadata=options.metadata,
                keys=frozenset(c.key for c in spec.schema if c.reducer.assigns_ids),
            )
        self.emit = Emitter(sink, modes, self.loop, source)
        self.committer = (
            Committer(checkpointer, self.emit.committed if self.emit.events else None)
            if checkpointer is not None
            else None
        )
        self.persist: Durable | None = (
            None if self.committer is None else durability_for(options.durability, self.committer)
        )
        """When checkpoints reach the checkpointer (the durability mode's strategy)."""
        self.hold: ThreadLease | None = None
        """The run's lease on its thread, while it runs (None without a checkpointer)."""
        self.trace: RunTrace | None = None
        """The run's spans, when it is traced (:func:`plait.instrument`, ``compile(tracing=True)``)."""
        self.durable = checkpointer is not None
        self.state = RunState(spec.schema)
        self.state.writers = spec.writers
        self._lww = frozenset(c.key for c in spec.schema if isinstance(c.reducer, LastWriteWins))
        self._with_writes: set[str] = set()
        """Checkpoints this run stored pending writes for and no child has folded yet: a
        child folds its parent's writes (deletes them in its commit) only when there may be
        some, so that a plain step's commit skips that statement."""
        self._inline_ok = renews_off_loop(checkpointer) and binding.cache is None  # (tasks read a cache on the loop)
        if self.committer is not None:
            self.committer.guard = self._check_lease
            store = binding.store
            if store is not None and store.backend is not checkpointer:
                self.committer.memory_elsewhere = store.backend

    # -- the TaskHost protocol -----------------------------------------------------------

    def emit_custom(self, node: str, step: int, payload: Any) -> None:
        self.emit.custom(node, step, payload)

    def message_sink(self, node: str, step: int, task_id: str, message_id: str) -> Callable[[Any], None] | None:
        return self.emit.message_sink(node, step, task_id, message_id)

    def unsettled_memory(self) -> list[MemoryWrite]:
        """The memory writes of this run's finished steps that are not committed yet."""
        return self.persist.unsettled_memory() if self.persist is not None else []

    async def confirm_lease(self) -> None:
        """Check with the store that the run's lease is still the thread's current one, right
        before a side effect runs (see :meth:`ThreadLease.confirm`).

        Raises:
            LeaseLostError: the lease was lost (the run stops at once).
        """
        if self.hold is not None:
            await self.hold.confirm()

    async def record_effect(self, task_id: str, name: str, value: Any) -> None:
        assert self.committer is not None and self.persist is not None
        await self.persist.persist_current()
        self.committer.submit(writes=self._batch([PendingWrite(task_id=task_id, kind="effect", key=name, value=value)]))
        await self.committer.drain()

    # -- subgraphs: a child run inherits this run's options and binding whole -------------

    def subgraph_run(self, sub: SubgraphRunner, segment: str) -> Driver:
        """The run of subgraph ``sub`` for a task (``segment``: ``node:task_id``), in the child
        namespace: this thread, options and binding, the subgraph's own breakpoints, no lease
        of its own (it borrows this one), no hooks (they steer the top-level run)."""
        ns = f"{self.namespace}|{segment}" if self.namespace else segment
        sink = self.caller_sink.child(segment) if isinstance(self.caller_sink, NestedSink) else None
        child = Driver(
            sub.spec,
            sub.graph_fp,
            replace(
                self.binding,
                namespace=ns,
                interrupt_before=sub.interrupt_before,
                interrupt_after=sub.interrupt_after,
                hooks=None,
            ),
            replace(self.options, checkpoint_id=None, wait=None, owner=self.owner),
            sink=sink,
            modes=self.caller_modes if sink is not None else frozenset(),
            path=(*self.path, segment),
            watch=self.watch,
        )
        if self.hooks is None or "messages" not in self.hooks.modes or self.hooks.subgraphs:
            # hooks that get no subgraph's items must still get a message the child streams
            # whole, as the parent task's write
            child.emit.share(self.emit)
        return child

    async def subgraph_scope(self) -> SubgraphScope | None:
        """Where a subgraph of this run stores its steps (None: not durable). This run's
        checkpoint that planned the subgraph's task is stored first (but with exit
        durability), so that a crash finds the child's steps again."""
        if self.checkpointer is None or self.thread_id is None or self.hold is None or self.committer is None:
            return None
        fence = self.committer.fence
        assert fence is not None
        if self.durability != "exit":
            await self.committer.drain()
        return SubgraphScope(
            checkpointer=self.checkpointer,
            thread_id=self.thread_id,
            lease=self.hold,
            fence=Fence(
                owner=fence.owner,
                token=fence.token,
                lease_namespace=fence.lease_namespace if fence.lease_namespace is not None else self.namespace,
            ),
        )

    # -- entry point ---------------------------------------------------------------------

    async def execute(self, input: Any) -> RunResult:
        """Run from the thread's head (or ``options.checkpoint_id``) under a lease of its own."""
        checkpoint_id = self.options.checkpoint_id
        if self.checkpointer is None or self.thread_id is None:
            return await self._outcome(input, checkpoint_id, None)
        async with ThreadLease(
            self.checkpointer,
            self.thread_id,
            self.owner,
            namespace=self.namespace,
            checkpoint_id=checkpoint_id,
            wait=self.options.wait,
        ) as hold:
            self.hold = hold
            assert self.committer is not None and hold.lease is not None
            self.committer.fence = Fence(owner=self.owner, token=hold.lease.token)
            try:
                if self.hooks is not None:
                    input = await self.hooks.on_start(hold.head, input)
                return await self._outcome(input, checkpoint_id, hold.head)
            finally:
                hold.stop_renewing()
                hold.released = self.committer.released
                if self.persist is not None:
                    hold.rest = self.persist.rest

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
        tracer = tracing.active
        if tracer is None and not self.binding.tracing:
            return await self._to_end(input, checkpoint_id, head)
        work = self._to_end(input, checkpoint_id, head)
        return await self._traced(tracer or graph_tracer(), input, head, checkpoint_id, (_Stop,), work)

    async def _to_end(self, input: Any, checkpoint_id: str | None, head: Checkpoint | None) -> RunResult:
        try:
            try:
                result = await self._execute(input, checkpoint_id, head)
            except _Stop as stop:
                result = stop.result
            if self.committer is not None:
                await self.committer.drain()
            self.emit.event(RunFinished(thread_id=self.thread_id, step=result.step, status=result.status))
            if self.hooks is not None:
                self.hooks.on_finish(result)
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
            self.carry = head.metadata  # the thread's own keys go on (its retention policy)
            head = await self._carried_over(head)  # an older thread is migrated first
            self.state = RunState.restored(
                self.spec.schema, head.values, head.versions, version=head.version, super_step=head.step
            )
            self.state.writers = self.spec.writers
            if self.persist is not None:
                self.persist.started_from(head)
        pending = list(head.pending_writes) if head is not None else []
        if head is not None and checkpoint_id is not None and not isinstance(input, Mapping):
            head, pending = await self._branch(head, pending, input)
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

    # -- the loop ------------------------------------------------------------------------

    async def _loop(self, cur: Checkpoint, tasks: Sequence[Task], pending: list[PendingWrite]) -> RunResult:
        steps = 0
        hooks, trace = self.hooks, self.trace
        while tasks:
            if hooks is not None and await hooks.at_step(cur):
                await self._stop_at(cur)
            if steps >= self.options.recursion_limit:
                error = RecursionLimitError(self.options.recursion_limit, self.thread_id)
                await self._save_pending(cur, [error_write("", "", cur.step, error)], status="error")
                raise error
            self.steps_done = steps
            work = self._step(cur, tasks, pending)
            cur, tasks = await (work if trace is None else trace.step(cur.step, cur.id, work))
            pending = []
            steps += 1
        if self.persist is not None:
            await self.persist.persist_current(cur)
        return self._result(cur, (), "done")

    async def _step(
        self, cur: Checkpoint, tasks: Sequence[Task], pending: list[PendingWrite]
    ) -> tuple[Checkpoint, tuple[Task, ...]]:
        """One super-step: run what is not done yet, stop on a failure or an interrupt, merge, plan, checkpoint."""
        hold = self.hold
        if hold is not None and hold.error is not None:
            raise hold.error
        tasks, held = hold_deferred(self.spec, tasks) if self.spec.defers else (tasks, ())
        inputs = read_pending(pending, self.spec.schema) if pending else no_pending()
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
        for o in outcomes:
            if o.parent is not None:  # the step ends the run here: the command is the parent task's
                raise ParentCommand(o.parent)
        folded = outcomes[0].folded if len(tasks) == 1 and len(outcomes) == 1 else None
        memory = inputs.memory
        try:
            changed = merge_step(self.state, tasks, results, base, cur.step, self._lww, folded)
        except PlaitError as error:
            saved = [
                result_write(
                    t.id, TaskOutcome(writes=results[t.id][0], routes=results[t.id][1], memory=memory.get(t.id, []))
                )
                for t in to_run
            ]
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
        step_memory = [w for t in tasks for w in memory.get(t.id, ())] if memory else []
        new, next_tasks = await self._next_checkpoint(
            cur, tasks, results, changed, bool(pending), held, step_memory, inputs.timings
        )
        self._emit_values()
        if self.after and next_tasks and any(t.node in self.after for t in tasks):
            await self._pause(new, [PendingWrite(task_id="", kind="breakpoint", key="after")], ())
        return new, next_tasks

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
        done = [(t, o) for t, o in pairs if o.error is None and o.interrupt is None and o.parent is None]
        saved = [result_write(t.id, o) for t, o in done]
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
        memory: Sequence[MemoryWrite] = (),
        timings: Mapping[str, tuple[float, int]] | None = None,
    ) -> tuple[Checkpoint, tuple[Task, ...]]:
        """Plan the next tasks (plus the deferred ones ``held`` back) and store the checkpoint
        with the step's ``memory`` store writes (without a checkpointer: applied now), and
        with how long its tasks took (``timings`` metadata) and who ran them (``owner``,
        when the caller named one: a worker does)."""
        persist = self.persist
        cid = new_checkpoint_id(after=cur.id) if persist is not None else f"{self.run_id}.{cur.step + 1}"
        next_tasks, barriers = plan_next(self.spec, cid, [(t, results[t.id][1]) for t in tasks], cur.barriers)
        if held:
            next_tasks = with_held(next_tasks, held)
        if persist is None:
            if memory and self.binding.store is not None:
                await self.binding.store.backend.acommit(memory=memory)
            return bare_checkpoint(cid, cur, next_tasks, barriers), next_tasks
        extra: dict[str, Any] = {"timings": step_timings(tasks, timings)} if timings else {}
        if self.options.owner is not None:
            extra["owner"] = self.options.owner
        new = self._checkpoint(
            cid,
            persist.parent_for_next(cur),
            cur.step + 1,
            next_tasks,
            barriers,
            "loop",
            written_keys(tasks, results),
            **extra,
        )
        parent = new.parent_id
        folds = resumed or parent in self._with_writes
        self._with_writes.discard(parent)
        if not next_tasks:
            # The run's last checkpoint gives the lease back in its own commit (a round
            # trip fewer per run, in every durability mode).
            self._finishing("idle")
        if self.emit.streamed:  # a streamed answer's reader goes first
            await self.emit.hand_over()
        await persist.store_step(new, frozenset(changed), folds=folds, memory=memory)
        return new, next_tasks

    # -- persistence ---------------------------------------------------------------------

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
        if self.committer is None or self.persist is None:
            return
        self._check_lease()
        self._finishing(status)
        await self.persist.persist_current(cur)
        self.persist.rest = status
        if writes:
            self.committer.submit(writes=self._batch(writes, cur.id))
        await self.committer.drain()

    async def _stop_at(self, cur: Checkpoint) -> None:
        """End the run at a super-step boundary, as its hooks asked: ``cur`` is stored (in
        every durability mode) and nothing of the next step has started; the lease is given
        back leaving the thread ``ready``, and the next run continues from ``cur``."""
        if self.persist is not None:
            await self.persist.persist_current(cur)
        raise _Stop(self._result(cur, (), "stopped"))

    async def _pause(self, cur: Checkpoint, writes: list[PendingWrite], interrupts: tuple[Interrupt, ...]) -> None:
        await self._save_pending(cur, writes, status="interrupted")
        self.emit.interrupted(interrupts, cur.step)
        if self.trace is not None:
            self.trace.interrupted(interrupts, cur.id)
        raise _Stop(self._result(cur, interrupts, "interrupted"))

    def _result(self, cur: Checkpoint, interrupts: tuple[Interrupt, ...], status: RunOutcome) -> RunResult:
        return RunResult(
            values=dict(self.state.table),
            interrupts=interrupts,
            status=status,
            checkpoint_id=cur.id if self.checkpointer is not None else None,
            step=cur.step,
        )
