"""Error messages in the command line's words.

The library's messages name Python calls (``invoke(None, thread_id=...)``,
``list_threads()``), which is right for a program and wrong for an operator at a shell. Here
the errors an operator meets get a message built from the facts the error carries, ending
with the ``plait`` command to run next, spelled with the graph, store and namespace this
command was given. Any other error keeps the library's message.
"""

from plait.cli.invocation import Invocation
from plait.errors import (
    STORE_ADDRESS_FORMS,
    AmbiguousCheckpointError,
    CheckpointNotFoundError,
    CommandLineError,
    ConcurrentUpdateError,
    ContextError,
    GraphChangedError,
    InvalidResumeError,
    NodeError,
    NodeTimeoutError,
    PlaitError,
    RecursionLimitError,
    RunRejectedError,
    StoreAddressError,
    StoreNotFoundError,
    StoreUnsupportedError,
    StoreVersionError,
    ThreadBusyError,
    ThreadExistsError,
    UnknownChannelError,
)

__all__ = ["DB_FORMS", "NO_INTERRUPT", "describe"]

DB_FORMS = STORE_ADDRESS_FORMS
"""What a ``--db`` (or ``$PLAIT_DB``) can be."""

NO_INTERRUPT = "no pending interrupt"
"""What the reason of an :class:`InvalidResumeError` says when the thread waits for no
answer at all (then it goes on to name ``invoke(None, ...)``, a Python call)."""


def describe(exc: BaseException, inv: Invocation) -> str:  # noqa: PLR0912 - one table of errors and the command that mends each
    """One line: what went wrong and, where there is one, the command that helps."""
    target = inv.target or "MODULE:GRAPH"
    flags = inv.flags()
    run_flags = inv.run_flags()
    if isinstance(exc, NodeError):
        thread = exc.thread_id
        if isinstance(exc, NodeTimeoutError):
            cause = f"TimeoutError: did not finish within {exc.timeout:g}s"
        elif exc.__cause__ is not None:
            cause = f"{type(exc.__cause__).__name__}: {exc.__cause__}"
        else:
            cause = str(exc)
        text = f"NodeError: node {exc.node!r} failed in step {exc.step + 1}"  # as the progress lines number it
        if thread:
            text += f" of thread {thread!r}: {cause}. The thread is resumable: "
            text += f"plait resume {target} {_q(thread)}{run_flags} re-runs only the tasks that did not finish"
        else:
            text += f": {cause}"
        return text
    if isinstance(exc, RecursionLimitError):
        thread = exc.thread_id or "THREAD"
        return (
            f"RecursionLimitError: the run reached the recursion limit of {exc.limit} super-steps without "
            f"finishing. If it is meant to loop that long, go on with a larger limit: plait resume {target} "
            f"{_q(thread)}{run_flags} --recursion-limit {exc.limit * 10}; otherwise check what ends its loops"
        )
    if isinstance(exc, CheckpointNotFoundError):
        ns = f" in namespace {exc.namespace!r}" if exc.namespace else ""
        store = inv.shown_db
        if exc.checkpoint_id:
            return (
                f"no checkpoint {exc.checkpoint_id!r} in thread {exc.thread_id!r}{ns} ({store}); "
                f"list its checkpoints with: plait history {_q(exc.thread_id)}{flags}"
            )
        return f"no thread {exc.thread_id!r}{ns} in {store}; list the threads with: plait threads{flags}"
    if isinstance(exc, RunRejectedError):
        return f"RunRejectedError: {exc} (plait submit --multitask enqueue|interrupt|rollback)"
    if isinstance(exc, ThreadBusyError):
        return (
            f"ThreadBusyError: thread {exc.thread_id!r} is being run by {exc.owner} (its lease expires in "
            f"{exc.expires_in:.1f}s unless renewed); wait for that run to finish, or use another thread"
        )
    if isinstance(exc, GraphChangedError):
        return (
            f"GraphChangedError: thread {exc.thread_id!r} was checkpointed by version {exc.thread_version} of the "
            f"graph, which {target} (version {exc.graph_version}) cannot continue: {'; '.join(exc.changes)}. "
            "Give the graph a new version and a migration (compile(version=N, migrations={N-1: fn}); see "
            "docs/operating.md), go on with the graph that wrote it, or fork it "
            f"(plait fork {_q(exc.thread_id)} --to NEW{flags}) and fix its state with plait update"
        )
    if isinstance(exc, StoreVersionError):
        if exc.found > exc.known:
            return f"StoreVersionError: {exc}"
        return (
            f"StoreVersionError: {exc.store} has schema version {exc.found}, this plait knows version "
            f"{exc.known}; upgrade it with: plait db migrate{inv.flags()}"
        )
    if isinstance(exc, ConcurrentUpdateError):
        return (
            f"ConcurrentUpdateError: thread {exc.thread_id!r} changed while this command prepared its write, "
            "so nothing was stored; run the command again"
        )
    if isinstance(exc, InvalidResumeError):
        thread = exc.thread_id or "THREAD"
        if NO_INTERRUPT in exc.reason:  # the library's advice there is a Python call
            return (
                f"InvalidResumeError: thread {thread!r} has no interrupt waiting for an answer, so --resume has "
                f"nothing to answer. If it has work left, continue it without --resume: plait resume {target} "
                f"{_q(thread)}{run_flags}; if it is idle (its last run done), run it again with new input: "
                f"plait run {target} --thread {_q(thread)} --input JSON{run_flags}"
            )
        return f"{exc}; see what the thread waits for with: plait state {_q(thread)}{flags}"
    if isinstance(exc, UnknownChannelError):
        known = ", ".join(exc.known) or "(none)"
        where = f" (written by node {exc.node!r})" if exc.node and exc.node not in ("update", "fork") else ""
        return f"UnknownChannelError: the graph has no channel {exc.channel!r}{where}; its channels are: {known}"
    if isinstance(exc, ThreadExistsError):
        return str(exc)
    if isinstance(exc, ContextError):
        return (
            f"ContextError: the graph's context type {exc.declared} does not fit what was given: {exc.problem}. "
            "Pass it as a JSON object of its fields: --context '{...}' (run, resume and submit take it)"
        )
    if isinstance(exc, AmbiguousCheckpointError):
        listed = ", ".join(f"{cid} (step {step})" for cid, step in exc.candidates)
        return (
            f"checkpoint id {exc.prefix!r} of thread {exc.thread_id!r} is ambiguous: {len(exc.candidates)} "
            f"checkpoints start with it: {listed}; give more of the id, or --step N"
        )
    if isinstance(exc, StoreNotFoundError):
        return (
            f"no database at {exc.address!r} (--db, else $PLAIT_DB, else plait.db): {exc.what} not found. "
            f"Check the path, or create the store with: plait db migrate --db {_q(exc.address)}. A --db is {DB_FORMS}"
        )
    if isinstance(exc, StoreAddressError):
        advice = f" {exc.advice}" if exc.advice else ""
        return f"--db {exc.address!r}: {exc.reason}.{advice} A --db is {DB_FORMS}"
    if isinstance(exc, StoreUnsupportedError):
        return (
            f"StoreUnsupportedError: the store {inv.shown_db} keeps no memory (plait.Store): memory lives "
            "in a SQLite file or a PostgreSQL database; pass --db plait.db or --db postgresql://..."
        )
    if isinstance(exc, CommandLineError):
        return str(exc)
    if isinstance(exc, PlaitError):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C); a run stopped mid-step resumes with plait resume"
    if isinstance(exc, OSError):
        where = f": {exc.filename!r}" if exc.filename else ""
        return f"{type(exc).__name__}: {exc.strerror or exc}{where}"
    return f"{type(exc).__name__}: {exc} (unexpected: run again with --debug for the traceback, and report it)"


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)
