"""The API server's ASGI app: :func:`create_app` over a store and the graphs it serves.

The composition root of :mod:`plait.serve`: it opens the run log beside the checkpoints,
builds the runner, mounts the routers (:mod:`plait.serve.routes_threads`,
:mod:`plait.serve.routes_runs`, :mod:`plait.serve.routes_assistants`) and the Studio at
``/studio``, and maps every plait error to a 4xx in the shape the LangGraph SDKs read.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from plait._version import __version__
from plait.checkpoint.address import open as open_store
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.sweeper import DEFAULT_RETENTION_SWEEP, RetentionSweeper
from plait.errors import PlaitError, ServeConfigError
from plait.graph.compiled import CompiledGraph
from plait.graph.loading import compiled_of
from plait.serve import (
    routes_assistants,
    routes_crons,
    routes_runs,
    routes_store,
    routes_thread_stream,
    routes_threads,
)
from plait.serve.assistants import Assistants
from plait.serve.executor import RunExecutor
from plait.serve.kernel import Server, error_response, status_of
from plait.serve.log import LocalRunLog, RunLog
from plait.serve.memory import served_store
from plait.serve.retention import sweep_events
from plait.serve.runner import Runner
from plait.serve.security import ApiCors, ApiKeyMiddleware
from plait.serve.sqlite_log import SqliteRunLog
from plait.serve.streams import Notifier
from plait.store import Store
from plait.store.sweeper import Sweeper

__all__ = ["ServeConfig", "create_app", "run_log_for"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeConfig:
    """How one ``plait serve`` answers."""

    api_key: str | None = None
    """Required in ``x-api-key`` on every request but ``/ok`` when set."""
    cors_origins: tuple[str, ...] = ()
    """Browser origins allowed to call the API (none: no CORS headers at all)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names served besides the loopback ones."""
    studio: bool = True
    """Serve the Studio at ``/studio`` (same store, its own token and CSRF checks)."""
    event_ttl: float = 3600.0
    """Seconds a run's stream events are kept after it ends (then only its checkpoints)."""
    retention_sweep: float = DEFAULT_RETENTION_SWEEP
    """Seconds between sweeps by the retention policy (the stored one, and threads' own; see
    :class:`~plait.checkpoint.sweeper.RetentionSweeper`); 0: none."""
    workers: int = 1
    """On PostgreSQL: the run queue's workers this process runs (0: none, only ``plait
    worker`` processes on the same database execute the runs)."""
    store: Mapping[str, Any] | None = None
    """The memory store's options (``plait.Store``'s ``index`` and ``ttl``, the embed function
    loaded), from the config file's ``store`` section; None: the checkpointer's own store."""


def run_log_for(checkpointer: Checkpointer) -> LocalRunLog:
    """Where a server that runs its runs itself keeps them and their events, for
    ``checkpointer``'s kind of store: the SQLite file itself, a SQLite file inside a file
    store's folder, or memory.

    Raises:
        ServeConfigError: a store whose runs go through the run queue (PostgreSQL), or one
            the server cannot keep runs beside.
    """
    kind = checkpointer.capabilities.kind
    address = checkpointer.address
    if kind == "memory" or (kind == "sqlite" and address is None):
        return SqliteRunLog(":memory:")
    if kind == "sqlite" and address is not None:
        return SqliteRunLog(address)
    if kind == "file" and address is not None:
        folder = Path(urlparse(address).path)
        folder.mkdir(parents=True, exist_ok=True)
        return SqliteRunLog(os.fspath(folder / ".plait-serve.sqlite3"))
    raise ServeConfigError(
        f"plait serve cannot keep its runs beside a {kind or type(checkpointer).__name__} store; serve a "
        "SQLite file (`plait serve --db app.db`), a file store, memory or PostgreSQL"
    )


def _parts(
    store: Checkpointer, assistants: Assistants, notifier: Notifier, cfg: ServeConfig
) -> tuple[RunLog, RunExecutor]:
    """The run log and what executes the runs: the server itself, or on PostgreSQL the run
    queue's workers (``cfg.workers`` of them in this process)."""
    if store.capabilities.kind != "postgres":
        local = run_log_for(store)
        return local, Runner(local, store, assistants, notifier)
    try:
        from plait.runs import Runs, WorkerSettings
        from plait.serve.pg_log import PgRunLog
        from plait.serve.queue_runner import QueueRunner
    except ImportError as exc:
        raise ServeConfigError(
            f"plait serve on PostgreSQL runs its runs through the run queue, which needs the runs extra "
            f"({exc.name} is missing): pip install 'plait[serve,runs]'"
        ) from None
    assert store.address is not None
    runs = Runs(store.address, schema=store.address_options.get("schema"))
    pg = PgRunLog(runs)
    # The server sweeps by the retention policy itself (one sweeper per process), not each worker.
    settings = WorkerSettings(retention_sweep=0)
    return pg, QueueRunner(runs, pg, store, assistants, notifier, workers=cfg.workers, settings=settings)


def _compiled(name: str, graph: Any) -> CompiledGraph:
    """A served graph compiled (a ``Graph`` builder is compiled under its name here).

    Raises:
        ServeConfigError: not a graph.
    """
    graph = compiled_of(graph)  # an entrypoint serves as its graph
    if isinstance(graph, CompiledGraph):
        return graph
    if callable(getattr(graph, "compile", None)):
        compiled = graph.compile(name=name)
        if isinstance(compiled, CompiledGraph):
            return compiled
    raise ServeConfigError(
        f"the graph served as {name!r} is a {type(graph).__name__}, not a plait Graph or CompiledGraph"
    )


def _served(
    graphs: Mapping[str, Any] | Iterable[CompiledGraph], checkpointer: Checkpointer, memory: Store | None
) -> dict[str, CompiledGraph]:
    """The served graphs by name, compiled, and bound to the served memory store: one store
    per server, so that what a node writes with ``ctx.store`` is what ``/store`` serves."""
    named = {
        name: _compiled(name, g)
        for name, g in (graphs.items() if isinstance(graphs, Mapping) else ((g.name, g) for g in graphs))
    }
    if memory is None:
        return named
    return {name: g.bind(checkpointer=checkpointer, store=memory) for name, g in named.items()}


@contextlib.asynccontextmanager
async def _sweeping(
    log: RunLog, cfg: ServeConfig, sweeper: Sweeper | None, retention: RetentionSweeper | None
) -> AsyncIterator[None]:
    """While the server runs: the stream events of ended runs dropped after ``event_ttl``, the
    memory store's expired items swept (by ``sweeper``), and the checkpoints by the retention
    policy (by ``retention``)."""
    events = asyncio.get_running_loop().create_task(sweep_events(log, cfg.event_ttl), name="plait serve sweep")
    try:
        async with (
            sweeper if sweeper is not None else contextlib.nullcontext(),
            retention if retention is not None else contextlib.nullcontext(),
        ):
            yield
    finally:
        events.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await events


def _memory_sweeper(checkpointer: Checkpointer, memory: Store | None, cfg: ServeConfig) -> Sweeper | None:
    """What sweeps the served memory store's expired items: the server itself, unless it has
    none or, on PostgreSQL, its in-process workers of the run queue sweep the database already."""
    if memory is None or (checkpointer.capabilities.kind == "postgres" and cfg.workers > 0):
        return None
    return Sweeper(memory)


def create_app(
    checkpointer: Checkpointer | str,
    graphs: Mapping[str, Any] | Iterable[CompiledGraph],
    *,
    config: ServeConfig | None = None,
) -> FastAPI:
    """The LangGraph-compatible API server as an ASGI app (what ``plait serve`` serves).

    Args:
        checkpointer: the store (a Checkpointer, or an address :func:`plait.checkpoint.open` takes).
        graphs: the graphs to serve, by name (an iterable names each by its ``name``): compiled
            graphs, builders or entrypoints; each is an assistant whose id is a UUID5 of its name.
        config: the API key, CORS origins, host names, the Studio, how long streams are kept.
    """
    cfg = config or ServeConfig()
    owned = isinstance(checkpointer, str)
    store = open_store(checkpointer) if isinstance(checkpointer, str) else checkpointer
    memory = served_store(store, cfg.store)
    named = _served(graphs, store, memory)
    now = time.time()
    notifier = Notifier()
    assistants = Assistants(named, now)
    log, runner = _parts(store, assistants, notifier, cfg)
    server = Server(checkpointer=store, assistants=assistants, log=log, runner=runner, notifier=notifier, memory=memory)
    studio: FastAPI | None = None  # the Studio, mounted at /studio below: its lifespan runs in this one
    crons = routes_crons.open_crons(log, functools.partial(routes_runs.make_run, server))
    memory_sweeper = _memory_sweeper(store, memory, cfg)
    retention_sweeper = RetentionSweeper(store, every=cfg.retention_sweep) if cfg.retention_sweep > 0 else None

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await store.asetup()
        await log.open()
        await runner.start()
        await crons.start()
        try:
            async with (
                _sweeping(log, cfg, memory_sweeper, retention_sweeper),
                studio_lifespan(studio) if studio is not None else contextlib.nullcontext(),
            ):
                yield
        finally:
            await crons.close()
            await runner.close()
            await log.close()
            if owned:
                await store.aclose()

    app = FastAPI(
        title="plait serve",
        version=__version__,
        description="The LangGraph Agent Server API over plait: assistants, threads, runs, streams.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.serve = server
    app.state.crons = crons
    app.state.memory_sweeper = memory_sweeper
    app.state.retention_sweeper = retention_sweeper

    @app.exception_handler(PlaitError)
    async def plait_error(_: Request, exc: PlaitError) -> Response:
        return error_response(status_of(exc), type(exc).__name__, str(exc))

    @app.exception_handler(ValueError)
    async def bad_value(_: Request, exc: ValueError) -> Response:
        return error_response(422, type(exc).__name__, str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return error_response(exc.status_code, "HTTPError", str(exc.detail))

    # matched in this order, one route after another: the runs' and threads' routes (every
    # turn of a chat) first; a path that matches with another method still finds its route
    for routes in (routes_runs, routes_threads, routes_thread_stream, routes_assistants, routes_crons, routes_store):
        app.router.routes.extend(routes.router.routes)
    if cfg.studio:
        from plait.server import StudioConfig, studio_lifespan
        from plait.server import create_app as create_studio

        studio = create_studio(store, named, config=StudioConfig(token=cfg.api_key, allowed_hosts=cfg.allowed_hosts))
        app.mount("/studio", studio)
    app.add_middleware(
        ApiKeyMiddleware, api_key=cfg.api_key, allowed_hosts=cfg.allowed_hosts, cors_origins=cfg.cors_origins
    )
    if cfg.cors_origins:
        app.add_middleware(ApiCors, origins=cfg.cors_origins)
    return app
