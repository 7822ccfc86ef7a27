"""The Studio's ASGI app: :func:`create_app` over a checkpointer and, optionally, graphs.

Reads go through :mod:`plait.inspect` (no graph needed); actions that fold values through
reducers or run nodes go through the graph's :class:`~plait.graph.compiled.CompiledGraph`,
rebound to the Studio's checkpointer. Every plait error becomes a 4xx response carrying its
message (``{"error": "ClassName", "message": "..."}``), never a 500.

This module is the composition root: it builds the :class:`~plait.server.studio.Studio`,
mounts the routers (:mod:`plait.server.api`, :mod:`plait.server.pages`) and installs the
error handlers. The routers share only what sits below them (:mod:`plait.server.studio`,
:mod:`plait.server.http`), so no module of the package imports this one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from plait._version import __version__
from plait.checkpoint.address import open as open_store
from plait.checkpoint.address import redact
from plait.checkpoint.base import Checkpointer
from plait.errors import PlaitError
from plait.graph.compiled import CompiledGraph
from plait.server import api, memory, pages
from plait.server.head import ApiHead
from plait.server.http import StudioRefusal, error_response, status_of
from plait.server.live import Watcher
from plait.server.paths import ThreadPaths
from plait.server.queue import RunQueue
from plait.server.security import Guard, SecurityMiddleware
from plait.server.studio import Studio, StudioConfig
from plait.server.traces import TraceLinks, check_trace_url
from plait.store import Store

__all__ = ["StudioConfig", "create_app", "studio_lifespan"]

STATIC = Path(__file__).parent / "static"


def create_app(
    checkpointer: Checkpointer | str,
    graphs: Mapping[str, CompiledGraph] | Iterable[CompiledGraph] | None = None,
    *,
    config: StudioConfig | None = None,
    store: Store | None = None,
) -> FastAPI:
    """The Studio as an ASGI app, to serve (``plait studio``) or mount in an existing app.

    Mounted (``host.mount("/studio", studio)``), every URL it emits is under the mount path,
    but Starlette does not run a mounted app's lifespan: the host runs it from its own with
    :func:`studio_lifespan`.

    Args:
        checkpointer: the store (a Checkpointer, or an address :func:`plait.checkpoint.open` takes).
        graphs: the graphs whose threads the Studio may edit and run, by name (an iterable
            names each by its ``name``). Without any, the Studio reads, copies and deletes,
            and refuses the actions that need a graph with a 400 saying to pass one.
        config: the token, extra host names, how the store is shown, and the link to a
            run's trace (``trace_url``).
        store: the memory store the Memory page shows and ``/api/store/`` serves (one with an
            index, for a search by meaning); default: the checkpointer's own (``checkpointer.store``).

    Raises:
        TraceUrlError: ``config.trace_url`` is not an http(s) URL with ``{trace_id}``.
    """
    cfg = config or StudioConfig()
    traces = TraceLinks(None if cfg.trace_url is None else check_trace_url(cfg.trace_url))  # before opening a store
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
        memory=store,
        traces=traces,
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
        "the run queue's runs (list, read, cancel), and the memory store's namespaces and items.",
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

    app.include_router(api.router)
    app.include_router(memory.router, responses=api.ERRORS)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(ApiHead)  # innermost: HEAD /api/... is a GET by the time it is routed
    app.add_middleware(SecurityMiddleware, guard=guard)
    app.add_middleware(ThreadPaths)  # outermost: the token redirect keeps an id's escaped '/'
    return app


def studio_lifespan(app: FastAPI) -> AbstractAsyncContextManager[None]:
    """The startup and shutdown of a Studio :func:`create_app` built, for the app it is
    mounted in to run from its own lifespan (Starlette runs only the outermost app's).

    On entry it sets the store up; on exit it ends the Studio runs still going, closes the
    run queue's connections and the change watcher, and closes the store if the Studio
    opened it from an address.

    Example::

        studio = create_app(store, graphs, config=StudioConfig(token=key))

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            async with studio_lifespan(studio):
                yield

        host = FastAPI(lifespan=lifespan)
        host.mount("/studio", studio)

    Raises:
        TypeError: ``app`` is not a Studio (one :func:`create_app` built).
    """
    if not isinstance(getattr(app.state, "studio", None), Studio):
        raise TypeError(f"studio_lifespan takes an app plait.server.create_app built, not {app!r}")
    # the lifespan create_app gave the app (it yields no state)
    return cast("AbstractAsyncContextManager[None]", app.router.lifespan_context(app))


ROUTERS = (api.router, memory.router, pages.router)
"""The routers the app includes: their own routes are what a path's methods are read from
(the app's list holds the inclusions, which carry no methods of their own)."""


def _methods(app: FastAPI, scope: Any) -> set[str]:
    methods: set[str] = set()
    for route in (*app.router.routes, *(r for router in ROUTERS for r in router.routes)):
        if route.matches(scope)[0] is not Match.NONE:  # a full or a method-only (partial) match
            methods |= set(getattr(route, "methods", None) or ())
    return methods | ({"HEAD"} if "GET" in methods else set())  # ApiHead answers HEAD wherever GET is


def _shown(checkpointer: Checkpointer) -> str:
    path = getattr(checkpointer, "path", None) or getattr(checkpointer, "folder", None)
    return redact(str(path)) if path else type(checkpointer).__name__


def _version() -> str:
    return __version__
