"""``plait studio``: serve the Studio (a local web UI and JSON API) over a store.

Needs the ``plait[studio]`` extra (FastAPI, uvicorn, Jinja2); imported only when the command
runs. Binds 127.0.0.1 unless told otherwise; a non-loopback ``--host`` needs ``--token``.
"""

import os
from typing import Annotated

import typer

from plait.cli.context import DB_ENV, DEFAULT_DB, Invocation, run_command
from plait.cli.demo import DEFAULT_DB as DEMO_DB
from plait.cli.options import AllowHost, Db, Debug, Port
from plait.errors import ArgumentError

__all__ = ["cmd_studio", "register", "studio_db"]


def studio_db(given: str | None) -> str:
    """``--db``, else ``$PLAIT_DB``, else ``plait.db``, else the demo's store when only it exists
    (so that ``plait demo && plait studio`` shows the demo)."""
    if given or os.environ.get(DB_ENV):
        return given or os.environ[DB_ENV]
    if not os.path.exists(DEFAULT_DB) and os.path.exists(DEMO_DB):
        return DEMO_DB
    return DEFAULT_DB


def cmd_studio(
    inv: Invocation,
    graphs: list[str],
    host: str,
    port: int,
    token: str | None,
    allow_hosts: list[str],
    open_browser: bool,
    trace_url: str | None = None,
) -> None:
    try:
        import uvicorn

        from plait.server import StudioConfig, create_app
        from plait.server.security import is_loopback
        from plait.server.traces import check_trace_url
    except ImportError as exc:
        raise ArgumentError(
            "studio", f"the Studio needs the studio extra ({exc.name} is missing): pip install 'plait[studio]'"
        ) from None
    if not is_loopback(host) and not token:
        raise ArgumentError(
            "--host",
            f"serving on {host!r} lets other machines reach the Studio, which has no login: pass --token SECRET too "
            "(or bind 127.0.0.1, the default)",
        )
    if not 0 <= port <= 65535:
        raise ArgumentError("--port", f"--port is a TCP port (0-65535), got {port}")
    if trace_url is not None:
        check_trace_url(trace_url)  # before the store is opened or the graphs imported
    checkpointer = inv.checkpointer()
    apps = {}
    for target in graphs:
        app = inv.graph(target, checkpointer=checkpointer)
        name = app.name if app.name not in apps and app.name != "Graph" else target
        apps[name] = app
    hosts = tuple(allow_hosts) + (() if is_loopback(host) else (host,))
    studio = create_app(
        checkpointer,
        apps,
        config=StudioConfig(token=token, allowed_hosts=hosts, store_name=inv.shown_db, trace_url=trace_url),
    )
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    inv.out.line(f"plait Studio on {inv.shown_db}: {url}")
    if not apps:
        inv.out.line("no graph: pass --graph MODULE:GRAPH to edit state, answer interrupts and run from the page")
    inv.out.line("press Ctrl-C to stop")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    uvicorn.run(studio, host=host, port=port, log_level="warning", access_log=False)


def register(app: typer.Typer) -> None:
    """The ``studio`` command."""

    @app.command()
    def studio(
        db: Db = None,
        graph: Annotated[
            list[str] | None,
            typer.Option(
                "--graph",
                "-g",
                metavar="MODULE:GRAPH",
                help="A graph whose threads the Studio may edit and run (repeatable).",
            ),
        ] = None,
        host: Annotated[
            str, typer.Option("--host", metavar="ADDR", help="The address to bind; not loopback needs --token.")
        ] = "127.0.0.1",
        port: Port = 8765,
        token: Annotated[
            str | None,
            typer.Option("--token", metavar="SECRET", help="Required on every request (header or the printed URL)."),
        ] = None,
        allow_host: AllowHost = None,
        open_browser: Annotated[bool, typer.Option("--open", metavar="", help="Open the page in a browser.")] = False,
        trace_url: Annotated[
            str | None,
            typer.Option(
                "--trace-url",
                metavar="TEMPLATE",
                help="Link each run's trace id to your tracing UI: an http(s) URL with {trace_id} "
                "(and {span_id}), e.g. http://localhost:16686/trace/{trace_id}.",
            ),
        ] = None,
        debug: Debug = False,
    ) -> None:
        """Serve the Studio: a local web page and JSON API over the store's threads."""
        run_command(
            lambda inv: cmd_studio(inv, graph or [], host, port, token, allow_host or [], open_browser, trace_url),
            as_json=False,
            debug=debug,
            db=studio_db(db),
        )
