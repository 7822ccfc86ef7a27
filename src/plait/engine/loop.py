"""The super-step loop: the thin async driver around planning, running and merging.

Per super-step: run the planned tasks concurrently (saving each finished task's result as a
pending write when the step has several), merge all writes through the reducers in planned
task order, plan the next tasks, commit one checkpoint, advance. Planning and merging are
pure; everything that talks to storage goes through the :class:`Committer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    Fence,
    Lease,
    PendingWrite,
    RestStatus,
    Task,
    WritesBatch,
    new_checkpoint_id,
)
from plait.engine.commit import Committer
from plait.engine.context import NodeContext, _on_loop_thread
from plait.engine.events import (
    CheckpointSaved,
    CustomEvent,
    Interrupted,
    NodeFailed,
    NodeFinished,
    NodeStarted,
    RunFinished,
    update_item,
)
from plait.engine.lease import LeaseRenewer, renews_off_loop
from plait.engine.pending import incompatibilities, result_write, resume_values, resume_writes
from plait.engine.plan import Route, plan_next, routes_from_json
from plait.engine.spec import GraphSpec
from plait.engine.tasks import StateView, TaskOutcome, compute_routes, run_all, run_task
from plait.errors import (
    CheckpointNotFoundError,
    ConcurrentWriteError,
    GraphChangedError,
    InvalidResumeError,
    LeaseLostError,
    NodeError,
    PlaitError,
    RecursionLimitError,
    ThreadBusyError,
)
from plait.state.reducers import LastWriteWins
from plait.state.run_state import RunState, StateUpdated
from plait.types import START, Command, Durability, Interrupt

__all__ = ["Run", "RunResult", "Sink"]

Sink = Callable[[str, Any], None]
"""Receives ``(mode, item)`` for the stream modes a caller asked for."""

log = logging.getLogger("plait.run")


def _host() -> str:
    """``host:pid`` of this process (a forked child names itself)."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
        saver: Checkpointer | None,
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
    ) -> None:
        if durability not in ("sync", "async", "exit"):
            raise ValueError(f"durability must be 'sync', 'async' or 'exit', got {durability!r}")
        if recursion_limit < 1:
            raise ValueError("recursion_limit must be at least 1")
        self.spec = spec
        self.saver = saver
        self.graph_fp = graph_fp
        self.thread_id = thread_id
        self.namespace = namespace
        self.durability = durability
        self.recursion_limit = recursion_limit
        self.before = interrupt_before
        self.after = interrupt_after
        self.sink = sink
        self.modes = modes
        if wait is not None and wait < 0:
            raise ValueError("wait must be a number of seconds (0 or more), or None not to wait")
        self.wait = wait
        self.run_id = uuid.uuid4().hex[:16]
        self.owner = owner or f"{_host()}:{self.run_id}"
        """The run's lease owner (a worker may give its own): who the thread's lease names."""
        self.lease: Lease | None = None
        """The lease the run holds: taken in :meth:`execute`; its token fences every commit."""
        self.committer = Committer(saver, self._committed) if saver is not None else None
        self._renewer: LeaseRenewer | None = None
        self._rest: RestStatus | None = None
        """How the run leaves the thread so far (None: it stored nothing): given back with the lease."""
        self.durable = saver is not None
        self.loop = asyncio.get_running_loop()
        self.state = RunState(spec.schema)
        self.state.writers = spec.writers
        self._reducer_specs = {c.key: c.reducer.spec() for c in spec.schema}
        self._lww = frozenset(c.key for c in spec.schema if isinstance(c.reducer, LastWriteWins))
        self._persisted_id: str | None = None
        """The newest checkpoint of this run that is (or is queued to be) stored."""
        self._unpersisted: set[str] = set()
        """Channels changed since ``_persisted_id`` (exit durability)."""
        self._pending_folds = False
        self._with_writes: set[str] = set()
        """Checkpoints this run stored pending writes for and no child has folded yet: a
        child folds its parent's writes (deletes them in its commit) only when there may be
        some, so that a plain step's commit skips that statement."""
        self._current: Checkpoint | None = None
        self._lease_error: BaseException | None = None
        """Why the run may not write any more (its lease was lost, or renewing it failed)."""
        self._inline_ok = renews_off_loop(saver)
        if self.committer is not None:
            self.committer.guard = self._check_lease

    def _committed(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        if self.sink is not None and "events" in self.modes:
            for cw in checkpoints:
                cp = cw.checkpoint
                self.sink(
                    "events", CheckpointSaved(checkpoint_id=cp.id, step=cp.step, source=str(cp.metadata.get("source")))
                )

    # -- the TaskHost protocol -----------------------------------------------------------

    def emit_custom(self, node: str, step: int, payload: Any) -> None:
        if self.sink is not None and not _on_loop_thread(self.loop):
            # a sync node in a worker thread: the sink belongs to the loop
            self.loop.call_soon_threadsafe(self.emit_custom, node, step, payload)
            return
        if self.sink is not None:
            if "custom" in self.modes:
                self.sink("custom", payload)
            if "events" in self.modes:
                self.sink("events", CustomEvent(node=node, step=step, payload=payload))

    async def confirm_lease(self) -> None:
        """Check with the store that the run's lease is still the thread's current one (by
        renewing it), right before a side effect runs: a run that lost its thread must not
        charge a card the new owner will charge again.

        Raises:
            LeaseLostError: the lease was lost (the run stops at once).
        """
        self._check_lease()
        if self.saver is None or self.lease is None:
            return
        try:
            self.lease = await self.saver.arenew_lease(self.lease)
        except LeaseLostError as exc:
            self._lease_error = exc
            raise

    def lease_lost(self, exc: BaseException) -> None:
        """The renewer's report: renewing failed; the run writes nothing more."""
        if self._lease_error is None:
            self._lease_error = exc

    async def record_effect(self, task_id: str, name: str, value: Any) -> None:
        assert self.committer is not None and self.saver is not None
        await self._persist_current()
        self.committer.submit(writes=self._batch([PendingWrite(task_id=task_id, kind="effect", key=name, value=value)]))
        await self.committer.drain()

    # -- entry point ---------------------------------------------------------------------

    async def execute(self, input: Any, checkpoint_id: str | None) -> RunResult:
        head: Checkpoint | None = None
        if self.saver is not None and self.thread_id is not None:
            self.lease, head = await self._lease_and_read(self.saver, self.thread_id, checkpoint_id)
            assert self.committer is not None
            self.committer.fence = Fence(owner=self.owner, token=self.lease.token)
            self._renewer = LeaseRenewer(self.saver, self.lease, self.lease_lost, loop=self.loop)
        try:
            try:
                result = await self._execute(input, checkpoint_id, head)
            except _Stop as stop:
                result = stop.result
            if self.committer is not None:
                await self.committer.drain()
            self._event(RunFinished(thread_id=self.thread_id, step=result.step, status=result.status))
            return result
        except BaseException:
            if self.committer is not None:
                with contextlib.suppress(BaseException):  # the original failure is the one to report
                    await self.committer.drain()
            self._event(RunFinished(thread_id=self.thread_id, step=self.state.super_step, status="failed"))
            raise
        finally:
            if self._renewer is not None:
                self._renewer.stop()
            await self._give_back()

    async def _give_back(self) -> None:
        """Release the lease (unless a commit did, or it was lost), leaving the thread as the
        run left it. A release that fails is logged, not raised: the run's outcome stands,
        and the lease ends by itself (at once for a new run on this machine once this
        process is gone, see :class:`~plait.checkpoint.holder.Holder`)."""
        lease, saver = self.lease, self.saver
        if lease is None or saver is None or isinstance(self._lease_error, LeaseLostError):
            return
        if self.committer is not None and self.committer.released:
            return
        try:
            await saver.arelease_lease(lease, status=self._rest)
        except Exception as exc:
            log.warning("could not give back the lease on thread %r: %s", lease.thread_id, exc)

    async def _lease_and_read(
        self, saver: Checkpointer, thread_id: str, checkpoint_id: str | None
    ) -> tuple[Lease, Checkpoint | None]:
        """Take the thread's lease and read the checkpoint the run starts from (one round trip
        on a backend that can), waiting up to :attr:`wait` seconds for a live holder. A read
        that fails after the lease was taken gives it back."""
        deadline = None if self.wait is None else self.loop.time() + self.wait
        pause = 0.05
        while True:
            try:
                return await saver.atake_lease_and_get(thread_id, self.owner, checkpoint_id, namespace=self.namespace)
            except ThreadBusyError as busy:
                left = 0.0 if deadline is None else deadline - self.loop.time()
                if left <= 0:
                    raise
                log.info("waiting for thread %r (%s); %.1fs left", thread_id, busy.owner, left)
                await asyncio.sleep(min(left, pause, max(busy.expires_in, 0.01)))
                pause = min(pause * 2, 0.5)

    def _check_lease(self) -> None:
        """Refuse to go on once the lease is lost: another run may own the thread now."""
        if self._lease_error is not None:
            raise self._lease_error

    async def _execute(self, input: Any, checkpoint_id: str | None, head: Checkpoint | None) -> RunResult:
        if head is None and checkpoint_id is not None and self.saver is not None and self.thread_id is not None:
            raise CheckpointNotFoundError(self.thread_id, checkpoint_id, self.namespace)
        if head is not None:
            await self._check_compatible(head)
            self._restore(head)
            self._persisted_id = head.id
        pending = list(head.pending_writes) if head is not None else []
        if head is not None and checkpoint_id is not None and not isinstance(input, Mapping):
            head, pending = await self._branch(head, pending)
        if isinstance(input, Command):
            if head is None:
                raise InvalidResumeError(self.thread_id, "the thread has no checkpoint to resume")
            cur = head
            if input.update is not None:
                cur, pending = await self._apply_update(cur, pending, input.update)
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

    def _restore(self, head: Checkpoint) -> None:
        st = self.state
        st._values = {**self.spec.schema.initial_values(), **head.values}
        st._versions = dict(head.versions)
        st.version = head.version
        st.super_step = head.step

    async def _check_compatible(self, head: Checkpoint) -> None:
        if head.metadata.get("graph") in (None, self.graph_fp):
            return
        reducers = head.metadata.get("reducers")
        if reducers is None and self.saver is not None and self.thread_id is not None:
            for cp in await self.saver.ahistory(self.thread_id, namespace=self.namespace):
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
            st._apply(changed, "input")
        step = head.step + 1 if head is not None else 0
        st.super_step = step
        routes = await compute_routes(self.spec, START, st, st.values, [], None)
        tasks, _ = plan_next(self.spec, cid, [(Task(id="", node=START), routes)], {})
        cp = self._checkpoint(
            cid,
            head.id if head else None,
            step,
            tasks,
            {},  # a new run starts with no join half-way
            {"source": "input", "step": step, "writes": {"input": sorted(changed)}},
        )
        self._emit_values()
        self._store(cp, set(changed), folds=False)
        await self._sync_point()
        return cp, tasks

    async def _branch(self, start: Checkpoint, pending: list[PendingWrite]) -> tuple[Checkpoint, list[PendingWrite]]:
        """A run from a checkpoint of the past (time travel) starts with a copy of it as the
        thread's new head (source ``replay``, the same step, its pending writes carried), so
        that the branch it starts is the thread's from the first step: an interrupt or a
        failure there is what ``get_state`` shows and what ``Command(resume=...)`` answers."""
        cid = new_checkpoint_id(after=start.id)
        cp = self._checkpoint(
            cid,
            start.id,
            start.step,
            start.next_tasks,
            start.barriers,
            {"source": "replay", "step": start.step, "replayed_from": start.id},
        )
        self._store(cp, set(), folds=False)
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
        self, cur: Checkpoint, pending: list[PendingWrite], update: Any
    ) -> tuple[Checkpoint, list[PendingWrite]]:
        st = self.state
        cid = new_checkpoint_id(after=cur.id)  # names the update's messages
        changed = st.fold(st.values, self.spec.schema.prepare(update, "update", cid), "update")
        if changed:
            st._apply(changed, "update")
        cp = self._checkpoint(
            cid,
            cur.id,
            cur.step + 1,
            cur.next_tasks,
            cur.barriers,
            {
                "source": "update",
                "step": cur.step + 1,
                "writes": {"update": sorted(changed)},
            },
        )
        self._store(cp, set(changed), folds=False)
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
                await self._save_pending(cur, [_error_write("", "", cur.step, error)], status="error")
                raise error
            cur, tasks = await self._step(cur, tasks, pending)
            pending = []
            steps += 1
        await self._persist_current(cur)
        return self._result(cur, (), "done")

    async def _step(
        self, cur: Checkpoint, tasks: Sequence[Task], pending: list[PendingWrite]
    ) -> tuple[Checkpoint, tuple[Task, ...]]:
        self._check_lease()
        results: dict[str, tuple[list[tuple[str, Any]], list[Route]]] = {}
        resume = resume_values(pending)
        effects: dict[str, dict[str, Any]] = {}
        breakpoint_taken = False
        for pw in pending:
            if pw.kind == "result":
                # (with_ids: results saved before messages were named by task have none yet)
                writes = self.spec.schema.with_ids([(w[0], w[1]) for w in pw.value["w"]], pw.task_id)
                results[pw.task_id] = (writes, routes_from_json(pw.value["r"]))
            elif pw.kind == "effect":
                effects.setdefault(pw.task_id, {})[pw.key] = pw.value
            elif pw.kind == "breakpoint" and pw.key != "after":
                breakpoint_taken = True
        to_run = [t for t in tasks if t.id not in results]
        if self.before and not breakpoint_taken and any(t.node in self.before for t in to_run):
            await self._pause(cur, [PendingWrite(task_id="", kind="breakpoint")], ())

        step = cur.step
        base = self.state._values  # the live table: nothing changes it until the merge
        view = _view(base, self.spec)
        multi = len(to_run) > 1
        # A lone sync node runs inline on the loop when the lease is renewed off the loop
        # (always, for plait's own backends); otherwise it runs in a worker thread so that a
        # slow node (an LLM call) cannot starve the lease renewal.
        inline = not multi and self._inline_ok
        flush = multi and self.committer is not None and self.durability != "exit"

        async def one(task: Task) -> TaskOutcome:
            if self._lease_error is not None:  # lost while siblings ran: start nothing more
                return TaskOutcome(error=self._lease_error)
            ctx = NodeContext(
                thread_id=self.thread_id,
                namespace=self.namespace,
                checkpoint_id=cur.id,
                step=step,
                node=task.node,
                task_id=task.id,
                host=self,
                resume_values=resume.get(task.id, []),
                effects=effects.get(task.id, {}),
            )
            if self.sink is not None:
                self._event(NodeStarted(node=task.node, task_id=task.id, step=step))
            node = self.spec.nodes[task.node]
            arg = task.arg if task.send else view
            out = await run_task(
                self.spec, node, arg, ctx, self.state, base, inline=inline, on_retry=self._retry_hook(task, step)
            )
            if out.error is None and out.interrupt is None:
                results[task.id] = (out.writes, out.routes)
                if flush:
                    assert self.committer is not None
                    self.committer.submit(writes=self._batch([result_write(task.id, out)], cur.id))
                if self.sink is not None:
                    self._task_done(task, out, step)
            return out

        if not multi:
            outcomes = [await one(to_run[0])] if to_run else []
        else:
            outcomes = await run_all(one(t) for t in to_run)

        self._check_lease()  # a node's effect found the lease lost, or the renewer did
        errors = [o.error for o in outcomes if o.error is not None]
        interrupts = tuple(o.interrupt for o in outcomes if o.interrupt is not None)
        if errors or interrupts:
            saved = [
                result_write(t.id, o)
                for t, o in zip(to_run, outcomes, strict=True)
                if o.error is None and o.interrupt is None
            ]
            saved += [
                PendingWrite(task_id=i.task_id, kind="interrupt", key=str(i.index), value=i.to_json())
                for i in interrupts
            ]
            if errors:
                saved += [
                    _error_write(t.id, t.node, step, o.error)
                    for t, o in zip(to_run, outcomes, strict=True)
                    if o.error is not None
                ]
                await self._save_pending(cur, saved, status="error")
                raise errors[0]
            await self._pause(cur, saved, interrupts)

        # merge, in planned task order
        changed: dict[str, Any] = {}
        try:
            if len(tasks) == 1:
                w = results[tasks[0].id][0]
                if w:
                    changed = self.state.fold(base, w, tasks[0].node)
            else:
                changed = self._merge(tasks, results, base, step)
        except PlaitError as error:
            saved = (
                [result_write(t.id, TaskOutcome(writes=results[t.id][0], routes=results[t.id][1])) for t in to_run]
                if multi
                else []
            )
            await self._save_pending(cur, [*saved, _error_write("", "", step, error)], status="error")
            raise
        st = self.state
        if changed:
            st._apply(changed, None)
            if self.sink is not None and "events" in self.modes:
                for t in tasks:
                    keys = tuple(dict.fromkeys(k for k, _ in results[t.id][0]))
                    if keys:
                        self._event(StateUpdated(keys=keys, version=st.version, super_step=step, node=t.node))
        st.advance()
        cid = new_checkpoint_id(after=cur.id) if self.saver is not None else f"{self.run_id}.{cur.step + 1}"
        next_tasks, barriers = plan_next(self.spec, cid, [(t, results[t.id][1]) for t in tasks], cur.barriers)
        if self.saver is None:
            new = _bare_checkpoint(cid, cur, next_tasks, barriers)
        else:
            writes_meta: dict[str, list[str]] = {}
            for t in tasks:
                for k, _ in results[t.id][0]:
                    written = writes_meta.setdefault(t.node, [])
                    if k not in written:
                        written.append(k)
            new = self._checkpoint(
                cid,
                self._parent_for_next(cur),
                cur.step + 1,
                next_tasks,
                barriers,
                {"source": "loop", "step": cur.step + 1, "writes": writes_meta},
            )
            parent = new.parent_id
            folds = bool(pending) or parent in self._with_writes
            self._with_writes.discard(parent)
            if not next_tasks:
                # The run's last checkpoint gives the lease back in its own commit (a round
                # trip fewer per run, in every durability mode).
                self._finishing("idle")
            if self.durability == "sync":
                assert self.committer is not None
                self._current = new
                self._persisted_id = new.id
                self._rest = "stale" if next_tasks else "idle"
                await self.committer.commit_now(
                    CheckpointWrite(checkpoint=new, changed=frozenset(changed), folds_parent_writes=folds)
                )
            else:
                self._store(new, set(changed), folds=folds)
        self._emit_values()
        if self.after and next_tasks and any(t.node in self.after for t in tasks):
            await self._pause(new, [PendingWrite(task_id="", kind="breakpoint", key="after")], ())
        return new, next_tasks

    def _merge(
        self,
        tasks: Sequence[Task],
        results: Mapping[str, tuple[list[tuple[str, Any]], list[Route]]],
        base: Mapping[str, Any],
        step: int,
    ) -> dict[str, Any]:
        batches = [(results[t.id][0], t.node) for t in tasks]
        if self._lww:
            lww_writer: dict[str, Task] = {}
            for t, (w, _node) in zip(tasks, batches, strict=True):
                for k, _ in w:
                    if k in self._lww:
                        prev = lww_writer.get(k)
                        if prev is not None and prev.id != t.id:
                            raise ConcurrentWriteError(k, (prev.node, t.node), step)
                        lww_writer[k] = t
        return self.state.fold_many(base, batches)

    # -- persistence ---------------------------------------------------------------------

    def _checkpoint(
        self,
        cid: str,
        parent: str | None,
        step: int,
        tasks: Sequence[Task],
        barriers: Mapping[str, tuple[str, ...]],
        metadata: dict[str, Any],
    ) -> Checkpoint:
        metadata["graph"] = self.graph_fp
        metadata["reducers"] = self._reducer_specs
        metadata["run_id"] = self.run_id
        st = self.state
        return Checkpoint(
            thread_id=self.thread_id or "",
            namespace=self.namespace,
            id=cid,
            parent_id=parent,
            step=step,
            values=dict(st._values),
            versions=dict(st._versions),
            next_tasks=tuple(tasks),
            barriers=dict(barriers),
            metadata=metadata,
            created_at=time.time(),
        )

    def _parent_for_next(self, cur: Checkpoint) -> str | None:
        return self._persisted_id if self.durability == "exit" else cur.id

    def _store(self, cp: Checkpoint, changed: set[str], *, folds: bool) -> None:
        """Queue ``cp`` for commit (or, in exit durability, only remember it)."""
        self._current = cp
        if self.committer is None:
            return
        self._rest = "stale" if cp.next_tasks else "idle"
        if self.durability == "exit":
            self._unpersisted |= changed
            self._pending_folds = folds or self._pending_folds
            return
        self.committer.submit(
            checkpoint=CheckpointWrite(checkpoint=cp, changed=frozenset(changed), folds_parent_writes=folds)
        )
        self._persisted_id = cp.id

    async def _persist_current(self, cur: Checkpoint | None = None) -> None:
        """Make sure the checkpoint the current step started from is stored (exit mode
        skips intermediate ones until something needs them)."""
        if self.committer is None:
            return
        cp = cur or self._current
        if cp is not None and self.durability == "exit" and self._persisted_id != cp.id:
            self.committer.submit(
                checkpoint=CheckpointWrite(
                    checkpoint=cp,
                    changed=frozenset(self._unpersisted),
                    folds_parent_writes=self._pending_folds,
                )
            )
            self._persisted_id = cp.id
            self._unpersisted = set()
            self._pending_folds = False

    async def _sync_point(self) -> None:
        if self.committer is not None and self.durability == "sync":
            await self.committer.drain()

    def _finishing(self, status: RestStatus) -> None:
        """The next commit is the run's last: it gives the lease back, leaving the thread
        ``status``. Renewals stop first, so that none can land after the release."""
        if self._renewer is not None:
            self._renewer.stop()
        if self.committer is not None:
            self.committer.release_on_next(status)
        self._rest = status

    async def _save_pending(self, cur: Checkpoint, writes: Sequence[PendingWrite], *, status: RestStatus) -> None:
        """Store what the step produced so far on the checkpoint it started from (stored
        first, if exit durability skipped it), and wait until it is durable: the run stops
        here (``status`` says how), and a resume must find these results. The same commit
        gives the lease back."""
        if self.committer is None:
            return
        self._check_lease()
        self._finishing(status)
        await self._persist_current(cur)
        self._rest = status
        if writes:
            self.committer.submit(writes=self._batch(writes, cur.id))
        await self.committer.drain()

    async def _pause(self, cur: Checkpoint, writes: list[PendingWrite], interrupts: tuple[Interrupt, ...]) -> None:
        await self._save_pending(cur, writes, status="interrupted")
        self._event(Interrupted(interrupts=interrupts, step=cur.step))
        raise _Stop(self._result(cur, interrupts, "interrupted"))

    def _batch(self, writes: Sequence[PendingWrite], checkpoint_id: str | None = None) -> WritesBatch:
        cid = checkpoint_id or self._persisted_id or ""
        self._with_writes.add(cid)
        return WritesBatch(
            thread_id=self.thread_id or "", namespace=self.namespace, checkpoint_id=cid, writes=tuple(writes)
        )

    def _result(
        self, cur: Checkpoint, interrupts: tuple[Interrupt, ...], status: Literal["done", "interrupted"]
    ) -> RunResult:
        return RunResult(
            values=dict(self.state._values),
            interrupts=interrupts,
            status=status,
            checkpoint_id=cur.id if self.saver is not None else None,
            step=cur.step,
        )

    # -- events --------------------------------------------------------------------------

    def _event(self, event: Any) -> None:
        if self.sink is not None and "events" in self.modes:
            self.sink("events", event)

    def _emit_values(self) -> None:
        if self.sink is not None and "values" in self.modes:
            self.sink("values", dict(self.state._values))

    def _task_done(self, task: Task, out: TaskOutcome, step: int) -> None:
        assert self.sink is not None
        if "updates" in self.modes:
            self.sink("updates", {task.node: update_item(out.writes)})
        if "events" in self.modes:
            writes: dict[str, list[Any]] = {}
            for k, v in out.writes:
                writes.setdefault(k, []).append(v)
            self.sink("events", NodeFinished(node=task.node, task_id=task.id, step=step, writes=writes))

    def _retry_hook(self, task: Task, step: int) -> Callable[[int, BaseException, bool], None] | None:
        if self.sink is None or "events" not in self.modes:
            return None

        def hook(attempt: int, err: BaseException, will_retry: bool) -> None:
            self._event(
                NodeFailed(
                    node=task.node, task_id=task.id, step=step, error=str(err), attempt=attempt, will_retry=will_retry
                )
            )

        return hook


_TRACEBACK_MAX = 16_000
"""Characters of a failed task's traceback kept with its error (the end, where it failed)."""


def _error_write(task_id: str, node: str, step: int, error: BaseException) -> PendingWrite:
    """The ``error`` pending write of a failed task (or of the step, with no task id): what
    failed and why, kept with the checkpoint so the thread can say so; a resume ignores it
    and runs the task again."""
    cause = error.__cause__ if isinstance(error, NodeError) and error.__cause__ is not None else error
    text = "".join(traceback.format_exception(cause))
    return PendingWrite(
        task_id=task_id,
        kind="error",
        value={
            "node": node or None,
            "step": step,
            "error": type(error).__name__,
            "type": f"{type(cause).__module__}.{type(cause).__qualname__}",
            "message": str(cause),
            "traceback": text[-_TRACEBACK_MAX:],
        },
    )


def _view(values: Mapping[str, Any], spec: GraphSpec) -> Any:
    return StateView(values, spec)


def _bare_checkpoint(
    cid: str, cur: Checkpoint, tasks: tuple[Task, ...], barriers: dict[str, tuple[str, ...]]
) -> Checkpoint:
    """Without a checkpointer nothing is stored: keep only what the loop reads next."""
    return Checkpoint(
        thread_id="", id=cid, parent_id=None, step=cur.step + 1, values={}, next_tasks=tasks, barriers=barriers
    )
