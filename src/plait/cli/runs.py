"""The run commands: ``worker``, ``submit``, ``runs``, ``run-cancel``, ``schedule``, ``schedules``.

They need PostgreSQL (``--db postgresql://...`` or ``$PLAIT_DB``) and the ``runs`` extra
(Procrastinate). ``--schema`` names the Postgres schema of the run tables, the job queue and
the checkpoints (default: the connection's search path, which ``PGOPTIONS`` can set too).
"""

import asyncio
import datetime
import logging
import os
import shlex
import warnings
from typing import Annotated, Any

import typer

from plait._sync import run_sync
from plait.checkpoint.sweeper import DEFAULT_RETENTION_SWEEP
from plait.cli.arguments import check_positive, parse_context, parse_json
from plait.cli.context import Invocation, run_command
from plait.cli.messages import NO_INTERRUPT
from plait.cli.options import ConfigFile, Db, Debug, Json, Otel, RetentionSweep
from plait.cli.otel import sending_traces
from plait.cli.output import EXIT_FAILED, EXIT_INTERRUPTED, Exit, note
from plait.cli.targets import graph_targets
from plait.errors import ArgumentError, TraceContextError
from plait.inspect_json import iso
from plait.tracing import carrier

__all__ = ["register"]

Schema = Annotated[
    str | None,
    typer.Option("--schema", metavar="NAME", help="The Postgres schema of runs, queue and checkpoints."),
]


COMMAND_FIELDS = ("resume", "update", "goto")
"""What ``plait submit --command`` takes: the fields of a ``Command`` a queued run applies."""


def _need_runs_extra() -> None:
    import importlib.util

    if importlib.util.find_spec("procrastinate") is None:
        raise ArgumentError(
            "--db", "runs and workers need the runs extra (the Procrastinate job queue): pip install 'plait[runs]'"
        )


def _postgres(inv: Invocation) -> None:
    if not inv.db.startswith(("postgres://", "postgresql://")):
        raise ArgumentError(
            "--db",
            f"runs and workers need PostgreSQL, and the store is {inv.shown_db!r}: pass --db postgresql://... "
            "(or set $PLAIT_DB)",
        )


def _runs(inv: Invocation, schema: str | None) -> Any:
    _need_runs_extra()
    _postgres(inv)
    from plait.runs import Runs

    return Runs(inv.db, schema=schema)


def _closing(runs: Any, body: Any) -> Any:
    async def go() -> Any:
        try:
            return await body(runs)
        finally:
            await runs.aclose()

    return run_sync(go())


def _seconds(value: float | None, option: str) -> None:
    if value is not None and value <= 0:
        raise ArgumentError(option, f"{option} must be a positive number of seconds, got {value:g}")


def cmd_worker(
    inv: Invocation, graphs: list[str], config: str | None, schema: str | None, options: dict[str, Any]
) -> None:
    targets = graph_targets(graphs, config)  # sets the config's env first: it may hold $PLAIT_DB
    _need_runs_extra()
    _postgres(inv)
    from plait.graph.loading import load_graph
    from plait.runs import Worker, WorkerSettings

    if not targets:
        raise ArgumentError(
            "--graph",
            "give the graphs this worker runs: --graph NAME=MODULE:GRAPH or --graph MODULE:GRAPH (repeatable), "
            "or --config langgraph.json",
        )
    check_positive(options["concurrency"], "--concurrency")
    for name in ("heartbeat", "stalled_after", "lease_ttl", "poll", "shutdown_timeout"):
        _seconds(options[name], "--" + name.replace("_", "-"))
    check_positive(options["sweep_every"], "--sweep-every")
    if options["memory_sweep_minutes"] is not None and not options["memory_sweep_minutes"] > 0:
        raise ArgumentError(
            "--memory-sweep",
            f"--memory-sweep must be a positive number of minutes, got {options['memory_sweep_minutes']:g}",
        )
    if not options["retention_sweep"] >= 0:
        raise ArgumentError(
            "--retention-sweep",
            f"--retention-sweep takes seconds (0: no retention sweep), got {options['retention_sweep']:g}",
        )
    name = options.pop("name")
    queues = tuple(options.pop("queues") or ("plait",))
    otel = options.pop("otel")
    settings = WorkerSettings(queues=queues, **options)
    with sending_traces(otel, "plait-worker") as traces:
        # runs name a graph as the worker was given it: NAME=, else the MODULE:GRAPH target itself
        named = {given or target: load_graph(target) for given, target in targets}
        worker = Worker(inv.db, named, schema=schema, name=name, settings=settings)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("procrastinate").setLevel(logging.WARNING)
        inv.out.line(
            f"worker {worker.name}: {len(worker.graphs)} graph(s), queues {', '.join(queues)}, on {inv.shown_db}"
        )
        if traces is not None:
            inv.out.line(traces)
        asyncio.run(worker.arun())


def cmd_submit(
    inv: Invocation,
    target: str,
    schema: str | None,
    input_text: str | None,
    wait: float | None,
    options: dict[str, Any],
) -> None:
    data = parse_json(input_text, "--input") if input_text is not None else None
    if data is not None and not isinstance(data, dict):
        raise ArgumentError("--input", "--input must be a JSON object of channel values")
    _seconds(wait, "--wait")
    _answer_options(options)
    options["after"] = _after(options.pop("after"), options.pop("delay"))
    try:
        options["trace_context"] = carrier.from_environment(os.environ)
    except TraceContextError as exc:
        raise ArgumentError("TRACEPARENT", str(exc)) from exc

    async def body(runs: Any) -> Any:
        await _warn_unserved(inv, runs, target, options["queue"], schema)
        run_id = await runs.asubmit(target, data, **options)
        return await runs.ajoin(run_id, wait) if wait is not None else await runs.aget(run_id)

    run = _closing(_runs(inv, schema), body)
    if inv.out.json:
        inv.out.emit(_record(run.to_json()))
    elif run.done:
        inv.out.line(f"run {run.run_id} on thread {run.thread_id}: {run.status}")
        if run.error:
            inv.out.line(f"  {run.error.get('type')}: {_run_error(run, target, inv, schema)}")
    else:
        inv.out.line(f"submitted run {run.run_id} on thread {run.thread_id} ({run.status})")
    if run.status in ("error", "timeout", "cancelled"):
        raise Exit(EXIT_FAILED)
    if run.status == "interrupted":
        raise Exit(EXIT_INTERRUPTED)


def _run_error(run: Any, target: str, inv: Invocation, schema: str | None) -> str:
    """A failed run's error message, in the command line's words where the worker's names a
    Python call: an answer (``--resume``) to a thread that waits for none."""
    message = str(run.error.get("message"))
    if run.error.get("type") != "InvalidResumeError" or NO_INTERRUPT not in message:
        return message
    q, thread = shlex.quote, shlex.quote(run.thread_id)
    flags = f" --db {q(inv.shown_db)}" + (f" --schema {q(schema)}" if schema else "")
    return (
        f"thread {run.thread_id!r} has no interrupt waiting for an answer, so --resume had nothing to answer. "
        f"If it has work left, continue it without --resume: plait submit {q(target)} -t {thread}{flags}; if it "
        f"is idle (its last run done), run it again with new input: plait submit {q(target)} -t {thread} "
        f"--input JSON{flags}"
    )


def _after(after: str | None, delay: float | None) -> datetime.datetime | None:
    """``--after`` (seconds from now, or an ISO 8601 time with its UTC offset) as the time
    :meth:`Runs.submit` takes as ``after``; ``--delay S``, its old name, is ``--after S``."""
    if delay is not None:
        if after is not None:
            raise ArgumentError("--after", "give --after once (--delay is its old name)")
        after = str(delay)
    if after is None:
        return None
    now = datetime.datetime.now(datetime.UTC)
    try:
        return now + datetime.timedelta(seconds=float(after))
    except (ValueError, OverflowError):  # not a number, or not a finite one
        pass
    try:
        when = datetime.datetime.fromisoformat(after)
    except ValueError:
        when = None
    if when is None or when.utcoffset() is None:
        raise ArgumentError(
            "--after",
            f"--after takes seconds from now (300) or a time with its UTC offset (2030-01-01T09:00:00+00:00); "
            f"got {after!r}",
        )
    return when


async def _warn_unserved(inv: Invocation, runs: Any, graph: str, queue: str, schema: str | None) -> None:
    """Say on stderr, before queueing, when no live worker would run ``graph`` on ``queue``
    (see :mod:`plait.runs.serving`): the run would wait, or fail, with nothing on screen
    saying why. A warning, not a refusal: a worker may be started after."""
    from plait.runs.serving import live_workers, unserved

    await runs.aopen()
    why = unserved(await live_workers(runs.db), graph, queue)
    if why is None:
        return
    q = shlex.quote
    given = q(graph) if ":" in graph else f"{q(graph)}=MODULE:GRAPH"  # a plain name needs its target
    start = f"plait worker --graph {given}" + ("" if queue == "plait" else f" --queue {q(queue)}")
    start += f" --db {q(inv.shown_db)}" + (f" --schema {q(schema)}" if schema else "")
    note(f"warning: {why}. Start one that serves it with: {start}")


def _answer_options(options: dict[str, Any]) -> None:
    """``--resume``, ``--context`` and ``--command`` (their texts, in ``options``) as
    :meth:`Runs.submit` takes them: the answer to the thread's interrupt, the run's context,
    and a command's ``update``, ``goto`` and ``resume``.

    Raises:
        ArgumentError: JSON that does not parse, a --command that is not a command, or an
            answer given twice.
    """
    resume, context, command = options.pop("resume"), options.pop("context"), options.pop("command")
    if resume is not None:
        options["resume"] = parse_json(resume, "--resume")
    if context is not None:
        options["context"] = parse_context(context)
    if command is None:
        return
    data = parse_json(command, "--command")
    if not isinstance(data, dict) or not data or set(data) - set(COMMAND_FIELDS):
        raise ArgumentError(
            "--command",
            f"--command is a JSON object of {', '.join(COMMAND_FIELDS)} (at least one), "
            f'e.g. {{"resume": "yes", "update": {{"topic": "x"}}}}; got {command!r}',
        )
    if "resume" in data and "resume" in options:
        raise ArgumentError("--command", "give the answer once: --resume, or the resume of --command")
    options.update(data)


def cmd_runs(inv: Invocation, schema: str | None, filters: dict[str, Any]) -> None:
    check_positive(filters.get("limit"), "--limit")
    found = _closing(_runs(inv, schema), lambda runs: runs.alist(**filters))
    if inv.out.json:
        inv.out.emit([_record(r.to_json()) for r in found])
        return
    if not found:
        inv.out.line("no runs")
        return
    rows = [
        (r.run_id, r.status, r.thread_id, r.graph.rsplit("/", 1)[-1], r.attempts, _when(r.created_at), r.worker or "")
        for r in found
    ]
    inv.out.table("runs", ("run", "status", "thread", "graph", "attempts", "submitted", "worker"), rows)


def cmd_cancel(inv: Invocation, schema: str | None, run_id: str) -> None:
    cancelled = _closing(_runs(inv, schema), lambda runs: runs.acancel(run_id))
    if inv.out.json:
        inv.out.emit({"run_id": run_id, "cancelled": cancelled})
    else:
        inv.out.line(f"run {run_id}: " + ("cancelled" if cancelled else "had ended already; nothing to cancel"))


def cmd_schedule(
    inv: Invocation, schema: str | None, target: str, cron: str, input_text: str | None, **opts: Any
) -> None:
    from plait.runs.cron import CronFieldsWarning, check_cron, next_fires, seconds_first

    data = parse_json(input_text, "--input") if input_text is not None else None
    try:
        check_cron(cron)
    except ValueError as exc:
        raise ArgumentError("--cron", str(exc)) from exc
    if (said := seconds_first(cron)) is not None:
        note(f"warning: {said} (check the next fire times below)")

    async def body(runs: Any) -> str:
        await _warn_unserved(inv, runs, target, "plait", schema)
        with warnings.catch_warnings():  # said above, in the command line's words
            warnings.simplefilter("ignore", CronFieldsWarning)
            schedule_id: str = await runs.aschedule(target, cron, data, **opts)
        return schedule_id

    schedule_id = _closing(_runs(inv, schema), body)
    fires = [iso(t.timestamp()) for t in next_fires(cron, 3)]
    if inv.out.json:
        inv.out.emit({"schedule_id": schedule_id, "next": fires})
    else:
        inv.out.line(f"schedule {schedule_id}: {target} at {cron!r}")
        inv.out.line(f"  next fires (UTC): {', '.join(fires)}")


def cmd_schedules(inv: Invocation, schema: str | None, remove: str | None) -> None:
    if remove is not None:
        _closing(_runs(inv, schema), lambda runs: runs.aunschedule(remove))
        if inv.out.json:
            inv.out.emit({"schedule_id": remove, "removed": True})
        else:
            inv.out.line(f"schedule {remove}: removed")
        return
    found = _closing(_runs(inv, schema), lambda runs: runs.aschedules())
    if inv.out.json:
        inv.out.emit([_record(s.to_json()) for s in found])
        return
    if not found:
        inv.out.line("no schedules")
        return
    from plait.runs.cron import next_fires

    rows = [
        (
            s.schedule_id,
            s.cron,
            s.graph,
            s.thread_id or "(new each tick)",
            _when(s.last_tick),
            _when(next_fires(s.cron, 1)[0].timestamp()),
        )
        for s in found
    ]
    inv.out.table("schedules", ("schedule", "cron", "graph", "thread", "last tick", "next tick (UTC)"), rows)


def _record(record: dict[str, Any]) -> dict[str, Any]:
    """A run or schedule record for ``--json``: times (a cron tick too) as ISO 8601 UTC with
    microseconds, as every command prints them (docs/cli-schemas/run-record.json)."""
    out = dict(record)
    for key in ("created_at", "started_at", "finished_at", "updated_at", "tick", "last_tick"):
        if out.get(key) is not None:
            out[key] = iso(out[key])
    return out


def _when(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def migrate_runs(dsn: str) -> str | None:
    """Apply the run tables and Procrastinate's schema to a PostgreSQL store (``plait db
    migrate``); what to say about it, or None when the ``runs`` extra is not installed."""
    import importlib.util

    if importlib.util.find_spec("procrastinate") is None:
        return None
    from plait.runs import Runs

    runs = Runs(dsn)
    found, applied = _closing(runs, lambda r: r.amigrate())
    if found is None or applied:
        return "run tables and job queue set up"
    return "run tables and job queue up to date"


# -- registration ----------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """The run commands."""

    @app.command()
    def worker(
        graph: Annotated[
            list[str] | None,
            typer.Option(
                "--graph",
                "-g",
                metavar="NAME=MODULE:GRAPH",
                help="A graph to run, for runs submitted under NAME (without NAME=: under MODULE:GRAPH) (repeatable).",
            ),
        ] = None,
        config: ConfigFile = None,
        concurrency: Annotated[int, typer.Option("--concurrency", "-c", metavar="N", help="Runs at once.")] = 10,
        queue: Annotated[
            list[str] | None, typer.Option("--queue", "-q", metavar="NAME", help="Queues to serve (default: plait).")
        ] = None,
        name: Annotated[str | None, typer.Option("--name", metavar="NAME", help="Default: host:pid.")] = None,
        heartbeat: Annotated[float, typer.Option("--heartbeat", metavar="S", help="Seconds between heartbeats.")] = 10,
        stalled_after: Annotated[
            float, typer.Option("--stalled-after", metavar="S", help="Seconds without heartbeat: a worker is dead.")
        ] = 30,
        sweep_every: Annotated[
            int, typer.Option("--sweep-every", metavar="S", help="Seconds between sweeps for dead workers' runs.")
        ] = 5,
        lease_ttl: Annotated[float, typer.Option("--lease-ttl", metavar="S", help="Thread lease seconds.")] = 30,
        poll: Annotated[float, typer.Option("--poll", metavar="S", help="Seconds between polls for jobs.")] = 5,
        shutdown_timeout: Annotated[
            float | None,
            typer.Option("--shutdown-timeout", metavar="S", help="On SIGTERM, seconds to wait for step boundaries."),
        ] = None,
        memory_sweep: Annotated[
            float | None,
            typer.Option(
                "--memory-sweep",
                metavar="MINUTES",
                help="Minutes between sweeps of expired memory items (default: the graphs' stores', else 60).",
            ),
        ] = None,
        retention_sweep: RetentionSweep = DEFAULT_RETENTION_SWEEP,
        schema: Schema = None,
        db: Db = None,
        otel: Otel = False,
        debug: Debug = False,
    ) -> None:
        """Run queued runs of the given graphs until SIGTERM (a second SIGTERM: stop at once)."""
        options = {
            "concurrency": concurrency,
            "queues": queue,
            "name": name,
            "heartbeat": heartbeat,
            "stalled_after": stalled_after,
            "sweep_every": sweep_every,
            "lease_ttl": lease_ttl,
            "poll": poll,
            "shutdown_timeout": shutdown_timeout,
            "memory_sweep_minutes": memory_sweep,
            "retention_sweep": retention_sweep,
            "otel": otel,
        }
        run_command(
            lambda inv: cmd_worker(inv, graph or [], config, schema, options), as_json=False, debug=debug, db=db
        )

    @app.command()
    def submit(
        target: Annotated[
            str, typer.Argument(metavar="GRAPH", help="The graph, as workers were given it: NAME, or MODULE:GRAPH.")
        ],
        thread: Annotated[str | None, typer.Option("--thread", "-t", metavar="THREAD", help="Default: new.")] = None,
        input: Annotated[
            str | None, typer.Option("--input", "-i", metavar="JSON", help="Channel values (@file for a file).")
        ] = None,
        multitask: Annotated[
            str, typer.Option("--multitask", metavar="HOW", help="reject, enqueue, interrupt or rollback.")
        ] = "reject",
        priority: Annotated[int, typer.Option("--priority", metavar="N", help="Higher runs first.")] = 0,
        after: Annotated[
            str | None,
            typer.Option("--after", metavar="S|TIME", help="Start no sooner: S seconds from now, or an ISO time."),
        ] = None,
        delay: Annotated[
            float | None, typer.Option("--delay", metavar="S", hidden=True, help="The old name of --after S.")
        ] = None,
        timeout: Annotated[float | None, typer.Option("--timeout", metavar="S", help="Run time limit.")] = None,
        wait: Annotated[float | None, typer.Option("--wait", metavar="S", help="Wait up to S s for the end.")] = None,
        queue: Annotated[str, typer.Option("--queue", "-q", metavar="NAME", help="The queue.")] = "plait",
        namespace: Annotated[str, typer.Option("--namespace", metavar="NS", help="The thread's namespace.")] = "",
        resume: Annotated[
            str | None,
            typer.Option("--resume", "-r", metavar="JSON", help="The answer to the thread's interrupt (@file too)."),
        ] = None,
        context: Annotated[
            str | None, typer.Option("--context", metavar="JSON", help="The run's context (a JSON object, or @file).")
        ] = None,
        command: Annotated[
            str | None,
            typer.Option("--command", metavar="JSON", help='A command: {"resume": ..., "update": {...}, "goto": ...}.'),
        ] = None,
        schema: Schema = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Queue a run of a graph for the workers (exit 1 if, waited for, it failed; 3 if it paused).

        With TRACEPARENT (and TRACESTATE) set, a worker that traces puts the run's spans in that trace.
        """
        if multitask not in ("reject", "enqueue", "interrupt", "rollback"):
            raise typer.BadParameter("use reject, enqueue, interrupt or rollback", param_hint="--multitask")
        opts = {
            "thread_id": thread,
            "multitask": multitask,
            "priority": priority,
            "after": after,
            "delay": delay,
            "timeout": timeout,
            "queue": queue,
            "namespace": namespace,
            "resume": resume,
            "context": context,
            "command": command,
        }
        run_command(lambda inv: cmd_submit(inv, target, schema, input, wait, opts), as_json=as_json, debug=debug, db=db)

    @app.command("runs")
    def runs_cmd(
        status: Annotated[str | None, typer.Option("--status", metavar="STATUS", help="Only this status.")] = None,
        thread: Annotated[
            str | None, typer.Option("--thread", "-t", metavar="THREAD", help="Only this thread.")
        ] = None,
        graph: Annotated[str | None, typer.Option("--graph", "-g", metavar="MODULE:GRAPH", help="Only it.")] = None,
        limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", help="At most N runs.")] = 50,
        before: Annotated[str | None, typer.Option("--before", metavar="RUN", help="The page after RUN.")] = None,
        namespace: Annotated[
            str | None, typer.Option("--namespace", metavar="NS", help="Only this namespace (default: all).")
        ] = None,
        schema: Schema = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List runs, newest first."""
        filters = {
            "status": status,
            "thread_id": thread,
            "namespace": namespace,
            "graph": graph,
            "limit": limit,
            "before": before,
        }
        run_command(lambda inv: cmd_runs(inv, schema, filters), as_json=as_json, debug=debug, db=db)

    @app.command("run-cancel")
    def run_cancel(
        run: Annotated[str, typer.Argument(metavar="RUN", help="The run id.")],
        schema: Schema = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Cancel a run: a queued one never starts, a running one stops at once."""
        run_command(lambda inv: cmd_cancel(inv, schema, run), as_json=as_json, debug=debug, db=db)

    @app.command()
    def schedule(
        target: Annotated[
            str, typer.Argument(metavar="GRAPH", help="The graph, as workers were given it: NAME, or MODULE:GRAPH.")
        ],
        cron: Annotated[str, typer.Option("--cron", metavar="CRON", help="'*/5 * * * *'; six fields: seconds last.")],
        input: Annotated[str | None, typer.Option("--input", "-i", metavar="JSON", help="Channel values.")] = None,
        thread: Annotated[
            str | None, typer.Option("--thread", "-t", metavar="THREAD", help="One thread for every tick.")
        ] = None,
        namespace: Annotated[str, typer.Option("--namespace", metavar="NS", help="The threads' namespace.")] = "",
        schema: Schema = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """Submit a run of a graph at every cron tick, exactly once per tick."""
        run_command(
            lambda inv: cmd_schedule(inv, schema, target, cron, input, thread_id=thread, namespace=namespace),
            as_json=as_json,
            debug=debug,
            db=db,
        )

    @app.command()
    def schedules(
        remove: Annotated[str | None, typer.Option("--remove", metavar="ID", help="Remove this schedule.")] = None,
        schema: Schema = None,
        db: Db = None,
        as_json: Json = False,
        debug: Debug = False,
    ) -> None:
        """List the schedules (or remove one with --remove)."""
        run_command(lambda inv: cmd_schedules(inv, schema, remove), as_json=as_json, debug=debug, db=db)
