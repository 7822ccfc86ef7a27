"""Keeping a run's lease on its thread alive while the run goes on."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import threading
import time
from typing import TYPE_CHECKING

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.memory import MemoryCheckpointer
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.checkpoint.sqlite import SqliteCheckpointer

if TYPE_CHECKING:
    from plait.engine.loop import Run

__all__ = ["LeaseRenewer", "renews_off_loop"]


def renews_off_loop(saver: Checkpointer | None) -> bool:
    """Whether a run on ``saver`` renews its lease from a plain thread, leaving the event
    loop free to be blocked by a lone sync node run inline.

    True for plait's own backends, whose async methods work from any event loop (their
    I/O runs on threads of their own); a third-party backend may bind its connections to
    one loop, so its lease is renewed by a task on the run's loop instead.
    """
    return saver is None or isinstance(
        saver, MemoryCheckpointer | SqliteCheckpointer | FileCheckpointer | PostgresCheckpointer
    )


class LeaseRenewer:
    """Keeps the run's lease on its thread alive while the run goes on.

    For plait's own backends the process's renewal thread renews it (see
    :func:`renews_off_loop` and :class:`_RenewalThread`), so a node blocking the loop cannot
    starve the renewal; for other backends a task on the loop does, and lone sync nodes then
    run in worker threads to keep the loop free. A renewal that fails marks the run: its
    next step and its next commit raise instead of writing to a thread another run may own
    by now.
    """

    def __init__(self, run: Run, owner: str) -> None:
        saver = run.saver
        assert saver is not None and run.thread_id is not None
        self.run: Run | None = run
        """None once stopped: a renewer waiting in the renewal thread's queue does not keep
        a finished run (and its state) alive."""
        self.owner = owner
        self.period = max(saver.lease_ttl / 3, 0.02)
        self._task: asyncio.Task[None] | None = None
        self.stopped = False
        self._renewing = threading.Lock()
        """Held through a renewal from the renewal thread, and by :meth:`stop`: a renewal in
        flight when the run ends finishes before the run releases its lease, so it cannot
        land after the release and leave a finished run's lease behind."""
        if renews_off_loop(saver):
            _RenewalThread.get().add(self)
        else:
            self._task = run.loop.create_task(self._renew())

    async def _renew(self) -> None:
        run = self.run
        assert run is not None and run.saver is not None and run.thread_id is not None
        try:
            while True:
                await asyncio.sleep(self.period)
                await run.saver.atake_lease(run.thread_id, self.owner, namespace=run.namespace)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            run._lease_error = exc

    def renew_blocking(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Renew once from the renewal thread (``loop`` is that thread's own); False when
        the renewal failed or the run is over, which ends this renewer."""
        with self._renewing:
            run = self.run
            if run is None:
                return False
            saver = run.saver
            assert saver is not None and run.thread_id is not None
            try:
                if isinstance(saver, MemoryCheckpointer):
                    saver.take_lease(run.thread_id, self.owner, namespace=run.namespace)
                else:
                    loop.run_until_complete(saver.atake_lease(run.thread_id, self.owner, namespace=run.namespace))
            except Exception as exc:
                run._lease_error = exc
                return False
            return True

    def stop(self) -> None:
        """End the renewals; returns once no renewal of this run is in flight."""
        with self._renewing:
            self.stopped = True
            self.run = None
        if self._task is not None:
            self._task.cancel()


class _RenewalThread:
    """One daemon thread renewing the leases of every run in the process.

    A thread per run would cost a thread start per ``invoke`` (``Thread.start`` waits for
    the new thread to run: 0.1-0.4 ms on a small virtual machine, a third of a short resume)
    and a thread per concurrent run. Renewals are due every third of a lease's life, so one
    thread keeps up with thousands of runs; a stopped renewer is dropped when it comes due.
    After ``fork`` the child starts its own thread (threads do not survive a fork).
    """

    _instance: _RenewalThread | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, LeaseRenewer]] = []
        self._order = itertools.count()
        self._thread = threading.Thread(target=self._run, name="plait-lease-renewal", daemon=True)
        self._thread.start()

    @classmethod
    def get(cls) -> _RenewalThread:
        with cls._instance_lock:
            found = cls._instance
            if found is None or found._pid != os.getpid():
                found = cls._instance = cls()
            return found

    def add(self, renewer: LeaseRenewer) -> None:
        with self._cond:
            due = time.monotonic() + renewer.period
            # Wake the thread only when this renewal is due before every other (it sleeps
            # until the earliest): each wake-up costs the run that adds a GIL hand-off, and
            # the renewers of runs that ended wait in the queue until they come due.
            if not self._due or due < self._due[0][0]:
                self._cond.notify()
            heapq.heappush(self._due, (due, next(self._order), renewer))

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while True:
                with self._cond:
                    while not self._due or self._due[0][0] > time.monotonic():
                        self._cond.wait(None if not self._due else self._due[0][0] - time.monotonic())
                    _, _, renewer = heapq.heappop(self._due)
                if renewer.stopped:
                    continue
                if renewer.renew_blocking(loop) and not renewer.stopped:
                    self.add(renewer)
        finally:
            loop.close()
