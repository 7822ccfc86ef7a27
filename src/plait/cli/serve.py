"""``plait serve``: the LangGraph Agent Server API over a store, for LangGraph's clients.

The ``langgraph-sdk`` clients (Python and JavaScript), ``useStream`` and agent-chat-ui talk to
it as to LangGraph's server: each served graph is an assistant, threads are the store's, runs
and their stream events are kept beside the checkpoints (:mod:`plait.serve`). Needs the
``plait[serve]`` extra (FastAPI, uvicorn); imported only when the command runs.

Binds 127.0.0.1 unless told otherwise; a non-loopback ``--host`` needs an API key. SIGINT
and SIGTERM stop it cleanly: uvicorn stops taking requests, the lifespan closes the runner
and the run log, then the store is closed and the command exits 0.
"""

import contextlib
import os
import signal
import socket
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from plait.checkpoint.sweeper import DEFAULT_RETENTION_SWEEP
from plait.cli.arguments import check_positive
from plait.cli.context import Invocation, run_command
from plait.cli.options import AllowHost, ConfigFile, Db, Debug, Otel, Port, RetentionSweep
from plait.cli.otel import sending_traces
from plait.cli.targets import graph_targets
from plait.errors import ArgumentError, ServeConfigError

__all__ = ["API_KEY_ENV", "DEFAULT_CONFIG", "DEFAULT_PORT", "register"]

API_KEY_ENV = "PLAIT_API_KEY"
"""The environment variable that is the default for ``--api-key`` (an env file may set it)."""
DEFAULT_PORT = 2024
"""LangGraph's ``langgraph dev`` port, where its clients and agent-chat-ui look by default."""
DEFAULT_CONFIG = "langgraph.json"
"""Read when neither ``--config`` nor ``--graph`` is given and it exists, as ``langgraph dev`` does."""
GRACEFUL_SECONDS = 10
"""Seconds a stopping server gives open requests (a followed stream) before it closes them."""


def cmd_serve(
    inv: Invocation,
    graphs: list[str],
    config: str | None,
    network: dict[str, Any],
    workers: int,
    studio: bool,
    otel: bool,
    retention_sweep: float = DEFAULT_RETENTION_SWEEP,
) -> None:
    try:  # the serve extra, said before anything is created
        import uvicorn  # noqa: F401

        import plait.serve.app  # noqa: F401
        from plait.server.security import is_loopback
    except ImportError as exc:
        raise ArgumentError(
            "serve", f"plait serve needs the serve extra ({exc.name} is missing): pip install 'plait[serve]'"
        ) from None
    host, port = network["host"], network["port"]
    check_positive(workers, "--workers")
    if not retention_sweep >= 0:
        raise ArgumentError(
            "--retention-sweep", f"--retention-sweep takes seconds (0: no retention sweep), got {retention_sweep:g}"
        )
    if not 0 <= port <= 65535:
        raise ArgumentError("--port", f"--port is a TCP port (0-65535), got {port}")
    if config is None and not graphs and os.path.exists(DEFAULT_CONFIG):
        config = DEFAULT_CONFIG
    targets = graph_targets(graphs, config)  # sets the config's env first: it may hold the key or $PLAIT_DB
    api_key = network["api_key"] or os.environ.get(API_KEY_ENV) or None
    if not is_loopback(host) and not api_key:
        raise ArgumentError(
            "--host",
            f"serving on {host!r} lets other machines reach the API: pass --api-key KEY too (or set ${API_KEY_ENV}), "
            "or bind 127.0.0.1, the default",
        )
    if not targets:
        raise ArgumentError(
            "--graph",
            "give the graphs to serve: plait serve --graph NAME=MODULE:GRAPH (repeatable), or --config langgraph.json",
        )
    with sending_traces(otel, "plait-serve") as traces:
        _serve(
            inv,
            targets,
            config,
            network,
            studio=studio,
            workers=workers,
            api_key=api_key,
            traces=traces,
            retention_sweep=retention_sweep,
        )


def _serve(
    inv: Invocation,
    targets: list[tuple[str | None, str]],
    config: str | None,
    network: dict[str, Any],
    *,
    studio: bool,
    workers: int,
    api_key: str | None,
    traces: str | None,
    retention_sweep: float = DEFAULT_RETENTION_SWEEP,
) -> None:
    """Serve until a signal stops it; ``traces`` is the line that says where the runs' spans
    go (None: not sent)."""
    import uvicorn

    from plait.serve.app import ServeConfig, create_app
    from plait.serve.assistants import assistant_id_of
    from plait.server.security import is_loopback

    host, port = network["host"], network["port"]
    checkpointer = inv.checkpointer(create=True)
    apps: dict[str, Any] = {}
    given = {name for name, _ in targets if name is not None}
    for name, target in targets:
        app = inv.graph(target, checkpointer=checkpointer)
        apps[name or _own_name(app.name, target, given | set(apps))] = app
    hosts = tuple(network["allow_hosts"]) + (() if is_loopback(host) else (host,))
    origins = tuple(network["cors_origins"])
    cfg = ServeConfig(
        api_key=api_key,
        cors_origins=origins,
        allowed_hosts=hosts,
        studio=studio,
        workers=workers,
        store=_store_options(config),
        retention_sweep=retention_sweep,
    )
    asgi = create_app(checkpointer, apps, config=cfg)
    listening = _listen(host, port)
    port = listening.getsockname()[1]  # --port 0: the port the system gave
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    served = ", ".join(f"{name} (assistant {assistant_id_of(name)})" for name in apps)
    inv.out.line(f"plait serve: {url} (API)" + (f", {url}/studio (Studio)" if studio else "") + f"; graphs: {served}")
    if checkpointer.capabilities.kind == "postgres":
        how = f"runs go through the run queue: {workers} worker(s) in this process, and any plait worker on it"
    else:
        how = "runs run in this process" + (f" (--workers {workers} is for PostgreSQL)" if workers > 1 else "")
    inv.out.line(f"store {inv.shown_db}; {how}; press Ctrl-C to stop")
    if traces is not None:
        inv.out.line(traces)
    server = uvicorn.Server(
        uvicorn.Config(asgi, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_SECONDS)
    )
    with listening, _stop_quietly(), contextlib.suppress(SystemExit):  # uvicorn exits when its startup failed
        server.run(sockets=[listening])
    if not server.started:
        raise ServeConfigError(
            "plait serve could not start (the error is above); run it again with --debug for more, and report it "
            "if the error is not in your graphs or your store"
        )
    inv.out.line("plait serve: stopped")


def _store_options(config: str | None) -> dict[str, Any] | None:
    """The memory store's options from the config's ``store`` section (its embed function
    loaded: after the config's env is set and its folder is on ``sys.path``, as for graphs)."""
    if config is None:
        return None
    from plait.serve.config import read_config
    from plait.serve.memory import load_store_options

    section = read_config(config).store
    return load_store_options(section, config) if section else None


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the URL is printed: a port in use is said at once,
    in one line, and ``--port 0`` prints the port the system chose."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named as TCP (not protocol 0, as socket.create_server leaves it): asyncio turns Nagle's
    # algorithm off only on sockets it knows are TCP, and without that every response waited
    # ~40 ms for the client's delayed ACK (measured: GET /ok p50 44 ms, 1.6 ms with it).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
        return sock
    except OSError as exc:
        sock.close()
        raise ArgumentError(
            "--port",
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): if another server uses the port, pass "
            "--port with another one",
        ) from None


def _own_name(name: str, target: str, taken: set[str]) -> str:
    """The name of a graph given without ``NAME=``: its own, as the Studio names it, unless it
    is the default ``Graph`` or taken, by another graph or by a ``NAME=`` (then the target)."""
    return name if name not in taken and name != "Graph" else target


@contextlib.contextmanager
def _stop_quietly() -> Iterator[None]:
    """SIGINT and SIGTERM end the server as a normal stop (exit 0).

    uvicorn takes both signals while it serves, shuts down gracefully, then raises each one
    again against the handler that was there before it; these handlers take that second
    delivery and do nothing, so the command goes on to close the store."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.signal(sig, lambda *_: None) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def register(app: typer.Typer) -> None:
    """The ``serve`` command."""

    @app.command()
    def serve(
        db: Db = None,
        graph: Annotated[
            list[str] | None,
            typer.Option(
                "--graph",
                "-g",
                metavar="NAME=MODULE:GRAPH",
                help="A graph to serve as the assistant NAME (repeatable); without NAME=, the graph's own name.",
            ),
        ] = None,
        config: ConfigFile = None,
        host: Annotated[
            str, typer.Option("--host", metavar="ADDR", help="The address to bind; not loopback needs --api-key.")
        ] = "127.0.0.1",
        port: Port = DEFAULT_PORT,
        api_key: Annotated[
            str | None,
            typer.Option(
                "--api-key",
                metavar="KEY",
                help=f"Required in the x-api-key header of every request but /ok. Default: ${API_KEY_ENV}.",
                show_default=False,
            ),
        ] = None,
        cors_origin: Annotated[
            list[str] | None,
            typer.Option(
                "--cors-origin",
                metavar="ORIGIN",
                help="A browser app's origin allowed to call the API, like http://localhost:3000 (repeatable).",
            ),
        ] = None,
        allow_host: AllowHost = None,
        workers: Annotated[
            int,
            typer.Option(
                "--workers",
                metavar="N",
                help="Runs at once on PostgreSQL (in-process workers); SQLite, file and memory stores run runs "
                "in the server itself.",
            ),
        ] = 1,
        no_studio: Annotated[
            bool, typer.Option("--no-studio", metavar="", help="Do not serve the Studio at /studio.")
        ] = False,
        retention_sweep: RetentionSweep = DEFAULT_RETENTION_SWEEP,
        otel: Otel = False,
        debug: Debug = False,
    ) -> None:
        """Serve the LangGraph Agent Server API (for langgraph-sdk, useStream, agent-chat-ui) over the store."""
        network = {
            "host": host,
            "port": port,
            "api_key": api_key,
            "cors_origins": cors_origin or [],
            "allow_hosts": allow_host or [],
        }
        run_command(
            lambda inv: cmd_serve(inv, graph or [], config, network, workers, not no_studio, otel, retention_sweep),
            as_json=False,
            debug=debug,
            db=db,
        )
