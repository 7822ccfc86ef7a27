"""Studio runs: runs started from the Studio's page, as asyncio tasks in the Studio's own
process, cancellable.

Not the run queue's runs (:mod:`plait.runs`, served by ``plait worker`` processes, which the
Studio shows through :mod:`plait.server.queue`): a Studio run lives and dies with the Studio
process, and only the checkpoints it commits outlast it.

A Studio run is ``CompiledGraph.astream(..., mode="events")``: the Studio watches its events
to show which node is running, and the store shows every checkpoint it commits, to this page
and to any other process reading the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from plait.engine.events import NodeFailed, NodeFinished, NodeStarted
from plait.errors import PlaitError
from plait.graph.compiled import CompiledGraph
from plait.inspect_json import iso

__all__ = ["StudioRun", "StudioRuns"]

StudioRunStatus = Literal["running", "done", "interrupted", "error", "cancelled"]
KEEP = 500
"""Finished runs remembered (the oldest finished are forgotten first; running ones never)."""


@dataclass(kw_only=True)
class StudioRun:
    """One run started from this Studio."""

    id: str
    thread_id: str
    namespace: str
    action: str
    graph: str
    status: StudioRunStatus = "running"
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    error: str | None = None
    running: set[str] = field(default_factory=set)
    """The nodes running right now."""
    task: asyncio.Task[None] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "thread_id": self.thread_id,
            "namespace": self.namespace,
            "action": self.action,
            "graph": self.graph,
            "status": self.status,
            "started_at": iso(self.started_at),
            "finished_at": None if self.finished_at is None else iso(self.finished_at),
            "error": self.error,
            "running": sorted(self.running),
        }


class StudioRuns:
    """The runs this Studio started, by id, newest last."""

    def __init__(self) -> None:
        self._runs: dict[str, StudioRun] = {}

    def start(
        self,
        app: CompiledGraph,
        graph: str,
        thread_id: str,
        input: Any,
        *,
        action: str,
        checkpoint_id: str | None = None,
    ) -> StudioRun:
        """Start a run as a task on the running loop and return its record at once."""
        rec = StudioRun(
            id=uuid.uuid4().hex[:12], thread_id=thread_id, namespace=app.namespace, action=action, graph=graph
        )
        rec.task = asyncio.get_running_loop().create_task(self._drive(rec, app, input, checkpoint_id))
        self._runs[rec.id] = rec
        finished = [k for k, r in self._runs.items() if r.status != "running"]
        for k in finished[: max(0, len(self._runs) - KEEP)]:
            del self._runs[k]
        return rec

    async def _drive(self, rec: StudioRun, app: CompiledGraph, input: Any, checkpoint_id: str | None) -> None:
        try:
            stream = app.astream(
                input, thread_id=rec.thread_id, checkpoint_id=checkpoint_id, mode="events", owner=f"studio:{rec.id}"
            )
            async for ev in stream:
                if isinstance(ev, NodeStarted):
                    rec.running.add(ev.node)
                elif isinstance(ev, NodeFinished | NodeFailed):
                    rec.running.discard(ev.node)
            state = await app.aget_state(rec.thread_id)
            rec.status = "interrupted" if state.interrupts else "done"
        except asyncio.CancelledError:
            rec.status = "cancelled"
            raise
        except PlaitError as exc:
            rec.status, rec.error = "error", str(exc)
        except Exception as exc:  # a node's own failure is stored with the thread too
            rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            rec.running.clear()
            rec.finished_at = time.time()

    def get(self, run_id: str) -> StudioRun | None:
        return self._runs.get(run_id)

    def of_thread(self, thread_id: str, namespace: str = "") -> list[StudioRun]:
        return [r for r in self._runs.values() if r.thread_id == thread_id and r.namespace == namespace]

    def running_nodes(self, thread_id: str, namespace: str = "") -> set[str]:
        out: set[str] = set()
        for r in self.of_thread(thread_id, namespace):
            if r.status == "running":
                out |= r.running
        return out

    def active(self, thread_id: str, namespace: str = "") -> StudioRun | None:
        return next((r for r in self.of_thread(thread_id, namespace) if r.status == "running"), None)

    async def cancel(self, rec: StudioRun) -> None:
        """Cancel the run and wait for it to stop (its lease is given back by the run)."""
        if rec.task is not None and not rec.task.done():
            rec.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rec.task

    async def close(self) -> None:
        for rec in list(self._runs.values()):
            await self.cancel(rec)
