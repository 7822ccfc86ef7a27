"""The run queue's runs in the Studio: :mod:`plait.runs` on the database of the Studio's store.

The Studio shows the runs that ``plait submit`` / ``Runs.submit`` queued and ``plait worker``
processes serve, and cancels them, through the public :class:`plait.runs.Runs` client, so
that a cancel here is exactly ``runs.cancel()``. They are not the Studio's own runs
(:mod:`plait.server.studio_runs`, asyncio tasks in this process): those are "Studio runs" on
the page, these are "runs".

A store has a run queue when it is PostgreSQL, the ``runs`` extra (Procrastinate) is
installed, and ``plait db migrate`` set up its database for runs. Which of these is missing
is a :class:`~plait.errors.NoRunQueueError` saying how to enable it, never a failure of the
page: the Runs page shows that message. The check is repeated until it passes (a
``plait db migrate`` run while the Studio is open shows on the next page load), on the one
pool kept for it; once it passed, the client is kept until the Studio stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import urllib.parse
from typing import TYPE_CHECKING, Any

from plait.checkpoint.base import Checkpointer
from plait.errors import NoRunQueueError, QueueSchemaError, RunWaitTimeoutError

if TYPE_CHECKING:
    from plait.runs.client import Runs
    from plait.runs.records import Run

__all__ = ["CANCEL_WAIT", "PAGE", "RunQueue", "error_summary"]

PAGE = 50
"""Runs per page, as threads are."""
CANCEL_WAIT = 5.0
"""Seconds a cancel waits for a running run's worker to end it (a pending run ends at once),
so that the page shows the status it ended with rather than ``running``."""
THREAD_RUNS = 20
"""The newest runs of a thread its page lists (the Runs page, filtered by thread, has all)."""


def _target(checkpointer: Checkpointer) -> tuple[str, str | None] | None:
    """``(dsn, schema)`` of a store in PostgreSQL, from its address; None for any other."""
    address = checkpointer.address
    if address is None or urllib.parse.urlsplit(address).scheme not in ("postgresql", "postgres"):
        return None
    schema = checkpointer.address_options.get("schema")
    return address, str(schema) if schema else None


def _kind(checkpointer: Checkpointer) -> str:
    """What the store is, in words, from its address."""
    from plait.checkpoint.address import redact

    address = checkpointer.address
    if address is None:
        return "in memory"
    scheme = urllib.parse.urlsplit(address).scheme
    if scheme == "file":
        return "a folder of files"
    return "a SQLite file" if len(scheme) < 2 or scheme == "sqlite" else f"at {redact(address)}"


class RunQueue:
    """The run queue of the Studio's store, opened on first use (see the module docstring)."""

    def __init__(self, checkpointer: Checkpointer, store: str) -> None:
        self._target = _target(checkpointer)
        self._kind = _kind(checkpointer)
        self._checkpointer = store
        self._runs: Runs | None = None
        self._unchecked: Runs | None = None
        """A client whose pool is open but whose database was not set up when last checked."""
        self._lock: asyncio.Lock | None = None

    @property
    def ready(self) -> bool:
        """Whether the queue was found (a look that must not cost a check uses this)."""
        return self._runs is not None

    def _enable_migrate(self) -> str:
        from plait.checkpoint.address import redact

        assert self._target is not None
        dsn, schema = self._target
        where = (
            f" with the Postgres schema {schema!r} on its search path (PGOPTIONS='-c search_path={schema}'), "
            f"or Runs(dsn, schema={schema!r}).migrate()"
            if schema
            else ""
        )
        return (
            f"run `plait db migrate --db {redact(dsn)}`{where} to add the run tables and the job queue, "
            "then reload this page"
        )

    async def client(self) -> Runs:
        """The open client.

        Raises:
            NoRunQueueError: the store is not PostgreSQL, the runs extra is missing, or the
                database has no run tables or job queue.
            QueueSchemaError: they are there but at a version this plait cannot use.
            RunsError: the database cannot be reached.
        """
        if self._runs is not None:
            return self._runs
        if self._target is None:
            raise NoRunQueueError(
                self._checkpointer,
                f"runs are served by PostgreSQL only, and this store is {self._kind}",
                "open the Studio on the PostgreSQL database the workers use (plait studio --db postgresql://...); "
                "see docs/workers.md",
            )
        if importlib.util.find_spec("procrastinate") is None:
            raise NoRunQueueError(
                self._checkpointer,
                "the runs extra (the Procrastinate job queue) is not installed",
                "pip install 'plait[runs]', then restart the Studio",
            )
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._runs is not None:
                return self._runs
            from plait.runs.client import Runs

            dsn, schema = self._target
            runs = self._unchecked or Runs(dsn, schema=schema, max_connections=2)
            self._unchecked = runs
            try:
                await runs.aopen()
            except QueueSchemaError as exc:
                if exc.found is None:
                    raise NoRunQueueError(
                        self._checkpointer, "its database has no run tables and job queue", self._enable_migrate()
                    ) from exc
                raise
            self._runs, self._unchecked = runs, None
            return runs

    async def page(
        self,
        *,
        status: str | None = None,
        thread_id: str | None = None,
        namespace: str | None = None,
        graph: str | None = None,
        limit: int = PAGE,
        before: str | None = None,
    ) -> tuple[list[Run], str | None]:
        """Runs newest first, and the cursor of the next page (the last run id of this one),
        None when this is the last."""
        runs = await self.client()
        found = await runs.alist(
            status=status,  # type: ignore[arg-type]  # checked by alist
            thread_id=thread_id,
            namespace=namespace,
            graph=graph,
            limit=limit + 1,
            before=before,
        )
        more = found[limit - 1].run_id if len(found) > limit else None
        return found[:limit], more

    async def get(self, run_id: str) -> Run:
        """The run (RunNotFoundError when there is none)."""
        return await (await self.client()).aget(run_id)

    async def of_thread(self, thread_id: str, namespace: str) -> tuple[list[Run], bool] | None:
        """The thread's newest runs and whether it has more; None when the store has no run
        queue (the thread page then shows no Runs section)."""
        try:
            found, more = await self.page(thread_id=thread_id, namespace=namespace, limit=THREAD_RUNS)
        except NoRunQueueError:
            return None
        return found, more is not None

    async def cancel(self, run_id: str, wait: float = CANCEL_WAIT) -> tuple[bool, Run]:
        """``runs.cancel(run_id)``, then the run: once ended, or after ``wait`` seconds (its
        worker stops a running run at once; a run whose worker died stays ``running`` until
        another worker finds it). False when the run had ended already."""
        runs = await self.client()
        cancelled = await runs.acancel(run_id)
        run = await runs.aget(run_id)
        if cancelled and not run.done and wait > 0:
            with contextlib.suppress(RunWaitTimeoutError):
                run = await runs.ajoin(run_id, wait)
            if not run.done:
                run = await runs.aget(run_id)
        return cancelled, run

    async def close(self) -> None:
        for runs in (self._runs, self._unchecked):
            if runs is not None:
                await runs.aclose()
        self._runs = self._unchecked = None


def error_summary(error: Any, width: int = 120) -> str:
    """One line of a run's stored error (``{"type": ..., "message": ...}``) for a list row."""
    if not error:
        return ""
    if isinstance(error, dict):
        text = f"{error.get('type') or 'Error'}: {error.get('message') or ''}".strip()
    else:
        text = str(error)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
