"""Runs of the API on PostgreSQL: submitted to :mod:`plait.runs`' queue and executed by its
workers, ``workers`` of them in the server's own process and any ``plait worker`` on the same
database, so the server can restart (or run several times over) while the runs go on.

A run is submitted with everything the API asked of it (a ``Command``, the checkpoint to
start from, its breakpoints, durability) and ``wire``: its worker stores the stream as the
LangGraph API's events, each soon after it is made, numbered on across attempts, which the
routes read back from the run log. The database's notifications (``LISTEN``) wake the
readers of a run in this process when a worker, here or elsewhere, stored its events or
ended it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import logging
import os
from collections.abc import Mapping
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.errors import RunNotFoundError
from plait.runs import Runs, Worker, WorkerSettings
from plait.runs._db import connect_kwargs
from plait.runs._store import CHANNEL
from plait.serve.assistants import Assistants
from plait.serve.pg_log import PgRunLog, record_of
from plait.serve.records import RunRecord
from plait.serve.streams import Notifier

__all__ = ["QueueRunner"]

log = logging.getLogger("plait.serve")


_HEARD = 10_000
"""How many ended runs a server remembers hearing of (see :attr:`QueueRunner.ended`)."""


class QueueRunner:
    """Submits the API's runs to the queue; runs ``workers`` workers in this process."""

    def __init__(
        self,
        runs: Runs,
        log: PgRunLog,
        checkpointer: Checkpointer,
        assistants: Assistants,
        notifier: Notifier,
        *,
        workers: int = 1,
        settings: WorkerSettings | None = None,
    ) -> None:
        self.runs = runs
        self.log = log
        self.checkpointer = checkpointer
        self.assistants = assistants
        self.notifier = notifier
        self.count = workers
        self.settings = settings or WorkerSettings()
        self.workers: list[tuple[Worker, asyncio.Task[None]]] = []
        self.listener: asyncio.Task[None] | None = None
        self.ended: collections.OrderedDict[str, None] = collections.OrderedDict()
        """The runs whose end this process heard of lately (the newest :data:`_HEARD`): a
        join woken by a run's events reads the run again only once its end was heard."""
        self.created: collections.OrderedDict[str, None] = collections.OrderedDict()
        """Runs queued by :meth:`create` lately that no :meth:`join` has waited for yet."""

    async def start(self) -> None:
        self.listener = asyncio.get_running_loop().create_task(self._listen(), name="plait serve listener")
        graphs = {a.name: a.graph for a in self.assistants.all()}
        for i in range(self.count):
            worker = Worker(
                self.runs.db.dsn, graphs, schema=self.runs.db.schema, name=f"serve:{os.getpid()}:{i}",
                settings=self.settings,
            )  # fmt: skip
            task = asyncio.get_running_loop().create_task(worker.arun(install_signal_handlers=False))
            started = asyncio.get_running_loop().create_task(worker.started.wait())
            await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            if task.done():
                task.result()  # a worker that could not start says why
            self.workers.append((worker, task))

    async def close(self) -> None:
        for worker, _ in self.workers:
            worker.stop()  # the first stop: runs stop at their next boundary and go back to the queue
        for worker, task in self.workers:
            try:
                await asyncio.wait_for(asyncio.shield(task), 10)
            except TimeoutError:
                worker.stop()  # the second stop: at once
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 10)
            except BaseException:  # a worker that failed has nothing left to stop
                pass
        self.workers.clear()
        if self.listener is not None:
            self.listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.listener

    async def _listen(self) -> None:
        """Wake this process's readers of a run when any worker stored its events or ended it."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.runs.db.dsn, autocommit=True, **connect_kwargs(self.runs.db.schema)
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    async for note in conn.notifies():
                        kind, _, run_id = note.payload.partition(":")
                        if kind != "event":
                            _remember(self.ended, run_id)
                        self.notifier.notify(run_id, kind)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: readers poll meanwhile
                log.warning("plait serve stopped hearing the database's notices (%s); trying again", exc)
                await asyncio.sleep(1.0)

    async def create(self, record: RunRecord, *, thread_tags: Mapping[str, Any] | None = None) -> RunRecord:
        """Submit ``record`` to the run queue, ``thread_tags`` merged into its thread's
        metadata first."""
        if thread_tags:
            await self.log.update_thread(record.thread_id, thread_tags, record.created_at)
        kw = record.kwargs
        command: dict[str, Any] = kw.get("command") or {}
        checkpoint_id = kw.get("checkpoint_id")
        given = kw.get("input")
        # the head matters to a run that names a checkpoint or brings nothing: most bring input
        head = None
        if checkpoint_id is not None or (not command and given is None):
            head = await self.checkpointer.aget(record.thread_id)
        if head is not None and checkpoint_id == head.id:
            checkpoint_id = None  # a client sends the head with every turn: the same as none
        if not command and given is None and checkpoint_id is None and head is None:
            given = {}
        after = kw.get("after")
        await self.runs.asubmit(
            record.graph,
            None if command else given,
            thread_id=record.thread_id,
            multitask=record.multitask,  # type: ignore[arg-type]
            context=kw.get("context"),
            metadata=record.metadata or None,
            resume=command.get("resume", ...),
            run_id=record.run_id,
            update=command.get("update"),
            goto=command.get("goto"),
            checkpoint_id=checkpoint_id,
            interrupt_before=kw.get("interrupt_before"),
            interrupt_after=kw.get("interrupt_after"),
            durability=kw.get("durability"),
            recursion_limit=kw.get("recursion_limit"),
            wire={
                "modes": kw.get("stream_mode") or ["values"],
                "subgraphs": bool(kw.get("subgraphs")),
                "temporary": record.temporary,  # a stateless run's thread: its worker deletes it
            },
            after=None if after is None else datetime.datetime.fromtimestamp(float(after), datetime.UTC),
            trace_context=kw.get("trace"),
        )
        _remember(self.created, record.run_id)
        return record

    async def cancel(self, run_id: str, action: str) -> RunRecord:
        found = await self.log.get_run(run_id)
        if found is None:
            raise RunNotFoundError(run_id)
        await self.runs.acancel(run_id, action=action)
        return found

    async def join(self, run_id: str) -> RunRecord:
        """The run once it has ended, woken by this process's one listener (the ``Notifier``)
        and checking once a second besides. ``Runs.ajoin`` would open a connection of its
        own to listen, per call: a new PostgreSQL backend for every ``runs.wait``.

        Raises:
            RunNotFoundError: no such run (or it was rolled back meanwhile).
        """
        # a run this process just queued has not ended unless its end was heard
        fresh = run_id in self.created
        self.created.pop(run_id, None)
        read = not fresh or run_id in self.ended
        while True:
            woken = self.notifier.register(run_id)
            try:
                if read:
                    run = await self.runs.aget(run_id)
                    if run.done:
                        return record_of(run)
                await asyncio.wait({woken}, timeout=1.0)
                # a run's events wake it too (a worker announces each batch): those need no read
                read = not woken.done() or woken.result() != "event" or run_id in self.ended
            finally:
                self.notifier.discard(run_id, woken)

    async def is_active(self, run_id: str) -> bool:
        found = await self.log.get_run(run_id)
        return found is not None and not found.done


def _remember(seen: collections.OrderedDict[str, None], run_id: str) -> None:
    """Add ``run_id`` to ``seen``, forgetting the oldest beyond :data:`_HEARD`."""
    seen[run_id] = None
    if len(seen) > _HEARD:
        seen.popitem(last=False)
