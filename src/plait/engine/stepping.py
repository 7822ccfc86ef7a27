"""Running a super-step's tasks: each task's context, its call, and what its outcome
leaves for the merge (the driver's part between planning and merging)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from plait.checkpoint.model import Checkpoint, Task
from plait.engine.context import TaskHost, current_node, node_context
from plait.engine.events import NodeStarted
from plait.engine.merge import Results
from plait.engine.migrating import Migrating
from plait.engine.options import Binding
from plait.engine.pending import result_write
from plait.engine.tasks import StateView, TaskOutcome, run_task
from plait.engine.together import run_all
from plait.errors import NoParentGraphError

__all__ = ["Stepping"]


class Stepping(Migrating):
    """Running a step's tasks (the fields are the driver's)."""

    binding: Binding
    steps_done: int
    _inline_ok: bool
    """A lone sync node may run on the loop itself (see :meth:`_run_tasks`)."""

    async def _run_tasks(
        self, cur: Checkpoint, to_run: Sequence[Task], inputs: Any, results: Results, base: Mapping[str, Any]
    ) -> list[TaskOutcome]:
        """Run a step's tasks concurrently, each finished one's writes kept in ``results``
        (and saved as a pending write when the step has several, in the modes that do)."""
        step = cur.step
        if self.spec.managed:  # RemainingSteps, IsLastStep: what the nodes and routers read beside the values
            base = {**base, **self._managed(self.steps_done)}
        view = StateView(base, self.spec)
        model = self.spec.schema.model
        multi = len(to_run) > 1
        # A lone sync node runs inline on the loop when the lease is renewed off the loop
        # (always, for plait's own backends); otherwise it runs in a worker thread so that a
        # slow node (an LLM call) cannot starve the lease renewal.
        inline = not multi and self._inline_ok
        flush = multi and self.persist is not None and self.persist.flushes_results
        emit, trace = self.emit, self.trace
        timed = self.persist is not None  # (how long a task took is stored with its checkpoint)
        host = cast(TaskHost, self)  # (the driver is the tasks' host)

        async def one(task: Task) -> TaskOutcome:
            if self.hold is not None and self.hold.error is not None:  # lost while siblings ran
                return TaskOutcome(error=self.hold.error)
            ctx = node_context(
                self.thread_id,
                self.namespace,
                cur.id,
                step,
                task.node,
                task.id,
                host,
                self.options.context,
                inputs.resume.get(task.id, []),
                inputs.effects.get(task.id, {}),
                self.binding.store,
            )
            if emit.active:
                emit.event(NodeStarted(node=task.node, task_id=task.id, step=step))
            node = self.spec.nodes[task.node]
            arg = node.sent_arg(task.arg) if task.send else view
            if model is not None and not task.send and not node.raw_state:
                arg = model.instance(base)  # one per task: a node may change its copy
            began = time.perf_counter() if timed else 0.0
            on_retry = emit.retry_hook(task, step) if emit.events else None
            traced = None if trace is None else trace.task(task.node, task.id, step)
            work = run_task(
                self.spec,
                node,
                arg,
                ctx,
                self.state,
                base,
                inline=inline,
                on_retry=on_retry if traced is None else traced.chain(on_retry),
                executor=self.binding.executor,
                on_attempt=None if traced is None else traced.attempt,
                cache=self.binding.cache,
            )
            out = await (work if traced is None else traced.run(work))
            if timed:
                out.seconds = time.perf_counter() - began
            if out.parent is not None and not self.path and current_node.get() is None:
                # no node of another graph runs this one: the command has nowhere to go
                out.error, out.parent = NoParentGraphError(task.node, step, self.thread_id), None
            if out.error is None and out.interrupt is None and out.parent is None:
                results[task.id] = (out.writes, out.routes)
                if timed:
                    inputs.timings[task.id] = (out.seconds, out.attempts)
                if out.memory:
                    inputs.memory[task.id] = out.memory
                if flush:
                    assert self.committer is not None
                    self.committer.submit(writes=self._batch([result_write(task.id, out)], cur.id))
                if emit.active:
                    emit.task_done(task, out, step)
            return out

        if not multi:
            return [await one(to_run[0])] if to_run else []
        return await run_all((one(t) for t in to_run), limit=self.options.max_concurrency)
