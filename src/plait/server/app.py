"""The Studio's ASGI app: :func:`create_app` over a checkpointer and, optionally, graphs.

Reads go through :mod:`plait.inspect` (no graph needed); actions that fold values through
reducers or run nodes go through the graph's :class:`~plait.graph.compiled.CompiledGraph`,
rebound to the Studio's checkpointer. Every plait error becomes a 4xx response carrying its
message (``{"error": "ClassName", "message": "..."}``), never a 500.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from plait import inspect as ins
from plait._frozen import thaw
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint
from plait.errors import (
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    GraphRequiredError,
    InvalidResumeError,
    LeaseLostError,
    NoRunQueueError,
    PlaitError,
    RunNotFoundError,
    ThreadBusyError,
    ThreadExistsError,
)
from plait.graph.compiled import CompiledGraph
from plait.server.live import Watcher
from plait.server.queue import RunQueue
from plait.server.security import CSRF_FIELD, CSRF_HEADER, Guard, SecurityMiddleware, origin_ok
from plait.server.studio_runs import StudioRun, StudioRuns
from plait.types import Command

__all__ = ["Studio", "StudioConfig", "StudioRefusal", "check_write", "create_app", "read_form", "studio_of"]

HERE = Path(__file__).parent


class StudioRefusal(Exception):
    """A request refused by the Studio itself (a bad Origin, a missing CSRF token)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


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
    flashes: dict[str, str] = field(default_factory=dict)

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


async def read_form(request: Request) -> dict[str, str]:
    """A URL-encoded form body (the page's forms are nothing else), each field's last value."""
    from urllib.parse import parse_qsl

    cached: dict[str, str] | None = getattr(request.state, "form", None)
    if cached is None:
        body = (await request.body()).decode("utf-8", "replace")
        cached = dict(parse_qsl(body, keep_blank_values=True))
        request.state.form = cached
    return cached


def status_of(exc: PlaitError) -> int:
    if isinstance(exc, CheckpointNotFoundError | RunNotFoundError | NoRunQueueError):
        return 404
    if isinstance(exc, ThreadBusyError | ConcurrentUpdateError | ThreadExistsError | LeaseLostError):
        return 409
    return 400


def error_response(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message}, status_code=status)


def json_response(data: Any, status: int = 200) -> Response:
    import orjson

    return Response(orjson.dumps(thaw(data), default=str), status_code=status, media_type="application/json")


def create_app(
    checkpointer: Checkpointer | str,
    graphs: Mapping[str, CompiledGraph] | Iterable[CompiledGraph] | None = None,
    *,
    config: StudioConfig | None = None,
) -> FastAPI:
    """The Studio as an ASGI app, to serve (``plait studio``) or mount in an existing app.

    Args:
        checkpointer: the store (a Checkpointer, or an address :func:`plait.checkpoint.open` takes).
        graphs: the graphs whose threads the Studio may edit and run, by name (an iterable
            names each by its ``name``). Without any, the Studio reads, copies and deletes,
            and refuses the actions that need a graph with a 400 saying to pass one.
        config: the token, extra host names, and how the store is shown.
    """
    from plait.checkpoint.address import open as open_store
    from plait.checkpoint.address import redact

    cfg = config or StudioConfig()
    owned = isinstance(checkpointer, str)
    if isinstance(checkpointer, str):
        cfg = StudioConfig(**{**cfg.__dict__, "store_name": cfg.store_name or redact(checkpointer)})
        opened = open_store(checkpointer)
    else:
        opened = checkpointer
        if not cfg.store_name:
            cfg = StudioConfig(**{**cfg.__dict__, "store_name": _shown(opened)})
    named: dict[str, CompiledGraph] = (
        dict(graphs) if isinstance(graphs, Mapping) else {g.name: g for g in (graphs or ())}
    )
    guard = Guard(token=cfg.token, allowed_hosts=cfg.allowed_hosts)
    studio = Studio(
        checkpointer=opened,
        graphs=named,
        guard=guard,
        config=cfg,
        queue=RunQueue(opened, cfg.store_name),
        watcher=Watcher(opened, interval=cfg.poll_interval),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await opened.asetup()
        try:
            yield
        finally:
            await studio.studio_runs.close()
            await studio.queue.close()
            await studio.watcher.close()
            if owned:  # opened here from an address: closed here too
                await opened.aclose()

    app = FastAPI(
        title="plait Studio",
        version=_version(),
        description="The JSON API of plait's Studio: threads, history, state, diffs, edits, forks, Studio runs, "
        "and the run queue's runs (list, read, cancel).",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.studio = studio

    @app.exception_handler(PlaitError)
    async def plait_error(_: Request, exc: PlaitError) -> JSONResponse:
        return error_response(status_of(exc), type(exc).__name__, str(exc))

    @app.exception_handler(StudioRefusal)
    async def refused(_: Request, exc: StudioRefusal) -> JSONResponse:
        return error_response(exc.status, "Refused", exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = error_response(exc.status_code, "HTTPError", str(exc.detail))
        if exc.status_code == 405:  # every method the path has, not only the first route's
            response.headers["Allow"] = ", ".join(sorted(_methods(request.app, request.scope)))
        return response

    @app.exception_handler(ValueError)
    async def bad_value(_: Request, exc: ValueError) -> JSONResponse:
        return error_response(400, type(exc).__name__, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return error_response(422, "ValidationError", problems or "the request is not valid")

    from plait.server import api, pages

    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.add_middleware(SecurityMiddleware, guard=guard)
    return app


def _methods(app: FastAPI, scope: Any) -> set[str]:
    from starlette.routing import Match

    methods: set[str] = set()
    for route in app.router.routes:
        if route.matches(scope)[0] is not Match.NONE:  # a full or a method-only (partial) match
            methods |= set(getattr(route, "methods", None) or ())
    return methods


def _shown(checkpointer: Checkpointer) -> str:
    from plait.checkpoint.address import redact

    path = getattr(checkpointer, "path", None) or getattr(checkpointer, "folder", None)
    return redact(str(path)) if path else type(checkpointer).__name__


def _version() -> str:
    from plait import __version__

    return __version__
