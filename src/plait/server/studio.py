"""The Studio as a service: what every route shares (the store, the graphs, the runs started
here, the run queue, the change watcher) and the actions the API and the page's forms both
take (update, fork, run, delete).

The routers reach it through ``request.app.state`` (:func:`studio_of`), so they import this
module, never :mod:`plait.server.app`, which builds one and mounts them.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from plait import inspect as ins
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint
from plait.errors import (
    CheckpointNotFoundError,
    GraphRequiredError,
    InvalidResumeError,
    ThreadBusyError,
    ThreadExistsError,
)
from plait.graph.compiled import CompiledGraph
from plait.server.http import StudioRefusal, read_form
from plait.server.live import Watcher
from plait.server.queue import RunQueue
from plait.server.security import CSRF_FIELD, CSRF_HEADER, Guard, origin_ok
from plait.server.studio_runs import StudioRun, StudioRuns
from plait.server.traces import TraceLinks
from plait.store import Store
from plait.types import Command

__all__ = ["Studio", "StudioConfig", "check_write", "studio_of"]


@dataclass(frozen=True, kw_only=True)
class StudioConfig:
    """How one Studio is served."""

    token: str | None = None
    """Required on every request when set (a non-loopback bind must set one)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names served besides the loopback ones (127.0.0.1, localhost, ::1)."""
    store_name: str = ""
    """The store as shown on the page (a DSN's password hidden)."""
    poll_interval: float | None = None
    """Seconds between store change checks (None: the watcher's default)."""
    trace_url: str | None = None
    """A link to a run's trace in your tracing UI, ``{trace_id}`` (and ``{span_id}``) where the
    ids go (``http://localhost:16686/trace/{trace_id}``); None: the trace ids are shown unlinked."""


@dataclass(kw_only=True)
class Studio:
    """What the routes share: the store, the graphs, the Studio runs started here (in this
    process) and the store's run queue (the runs ``plait worker`` processes serve)."""

    checkpointer: Checkpointer
    graphs: dict[str, CompiledGraph]
    guard: Guard
    config: StudioConfig
    studio_runs: StudioRuns = field(default_factory=StudioRuns)
    queue: RunQueue
    watcher: Watcher
    memory: Store | None = None
    """The memory store the Memory page shows (None: the checkpointer's own, ``checkpointer.store``)."""
    flashes: dict[str, str] = field(default_factory=dict)
    traces: TraceLinks = field(default_factory=TraceLinks)
    """The links to the traces of the runs that wrote the checkpoints (``config.trace_url``)."""

    def flash(self, message: str) -> str:
        """Keep a confirmation for the page a form redirects to; returns its key."""
        key = secrets.token_urlsafe(8)
        self.flashes[key] = message
        while len(self.flashes) > 200:
            self.flashes.pop(next(iter(self.flashes)))
        return key

    def graph_for(self, action: str, head: Checkpoint | None, name: str | None = None) -> tuple[str, CompiledGraph]:
        """The graph to act on a thread with: ``name``, else the one whose fingerprint the
        thread's head records, else the only one.

        Raises:
            GraphRequiredError: no graph was given to the Studio, or none fits.
        """
        if not self.graphs:
            raise GraphRequiredError(action, "start the Studio with --graph MODULE:GRAPH (plait studio --graph ...)")
        if name is not None:
            if name not in self.graphs:
                raise GraphRequiredError(action, f"no graph named {name!r}; the Studio has {', '.join(self.graphs)}")
            return name, self.graphs[name]
        recorded = head.metadata.get("graph") if head is not None else None
        for n, g in self.graphs.items():
            if recorded and g.fingerprint == recorded:
                return n, g
        if len(self.graphs) == 1:
            return next(iter(self.graphs.items()))
        raise GraphRequiredError(action, f"say which graph (graph=...): one of {', '.join(self.graphs)}")

    # -- actions shared by the API and the page's forms ---------------------------------------

    async def update(
        self, thread: str, namespace: str, values: Any, as_node: str | None, graph: str | None
    ) -> tuple[str, Any]:
        head = await ins.get_checkpoint(self.checkpointer, thread, namespace=namespace)
        _, app = self.graph_for("editing the state", head, graph)
        app = self._bound(app, namespace)
        cid = await app.aupdate_state(thread, values, as_node)
        await self.watcher.poke()
        return cid, (await ins.get_checkpoint(self.checkpointer, thread, cid, namespace=namespace)).metadata.get(
            "writes"
        )

    async def fork(
        self,
        thread: str,
        namespace: str,
        checkpoint_id: str | None,
        target: str,
        edits: Mapping[str, Any] | None,
        graph: str | None,
    ) -> str:
        src = await ins.get_checkpoint(self.checkpointer, thread, checkpoint_id, namespace=namespace)
        if not edits:
            cid = await ins.copy_checkpoint(self.checkpointer, thread, src.id, target, namespace=namespace)
        else:
            _, app = self.graph_for("a fork with edits", src, graph)
            if await self.checkpointer.aget(target, namespace=namespace) is not None:
                raise ThreadExistsError(target, namespace, "Fork into a new thread id, or delete that thread first.")
            cid = await self._bound(app, namespace).afork(thread, target, checkpoint_id=src.id, edits=dict(edits))
        await self.watcher.poke()
        return cid

    async def run(
        self,
        thread: str,
        namespace: str,
        action: str,
        resume: Any,
        checkpoint_id: str | None,
        graph: str | None,
    ) -> StudioRun:
        head = await ins.get_checkpoint(self.checkpointer, thread, checkpoint_id, namespace=namespace)
        name, app = self.graph_for(f"{action} (a run)", head, graph)
        app = self._bound(app, namespace)
        active = self.studio_runs.active(thread, namespace)
        if active is not None:
            raise ThreadBusyError(thread, f"studio:{active.id}", 0.0, namespace=namespace, alive=True)
        if action == "resume":
            if not ins.waiting_interrupts(head.pending_writes):
                raise InvalidResumeError(thread, "it has no interrupt waiting for an answer; continue it instead")
            rec = self.studio_runs.start(app, name, thread, Command(resume=resume), action=action)
        elif action == "replay":
            rec = self.studio_runs.start(app, name, thread, None, action=action, checkpoint_id=head.id)
        else:
            rec = self.studio_runs.start(app, name, thread, None, action=action)
        await self.watcher.poke()
        return rec

    async def delete(self, thread: str, namespace: str) -> int:
        info = await self.checkpointer.aget_thread(thread, namespace=namespace)
        if info is None:
            raise CheckpointNotFoundError(thread, None, namespace)
        await self.checkpointer.adelete_thread(thread, namespace=namespace)
        await self.watcher.poke()
        return info.checkpoints

    def _bound(self, app: CompiledGraph, namespace: str) -> CompiledGraph:
        if app.checkpointer is self.checkpointer and app.namespace == namespace:
            return app
        return app.bind(checkpointer=self.checkpointer, namespace=namespace)


def studio_of(request: Request) -> Studio:
    studio: Studio = request.app.state.studio
    return studio


async def check_write(request: Request) -> None:
    """Refuse a write without the Studio's own ``Origin`` and CSRF token (a dependency of
    every route that writes)."""
    studio = studio_of(request)
    if not origin_ok(request.headers, request.url.scheme):
        raise StudioRefusal(403, "cross-origin write refused: a write must come from this Studio's own page (Origin)")
    given = request.headers.get(CSRF_HEADER)
    if given is None and request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        given = (await read_form(request)).get(CSRF_FIELD)
    if not studio.guard.csrf_ok(given):
        raise StudioRefusal(
            403, "missing or wrong CSRF token: send the X-CSRF-Token header (GET /api/csrf gives it) or reload the page"
        )
