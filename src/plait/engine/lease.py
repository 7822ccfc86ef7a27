"""Keeping a run's lease on its thread alive while the run goes on, and noticing it was lost."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable

from plait.checkpoint.base import Checkpointer, Lease

__all__ = ["LeaseRenewer", "renews_off_loop"]

LostHandler = Callable[[BaseException], None]
"""Told why a renewal failed (a LeaseLostError, or the store's own failure)."""


def renews_off_loop(saver: Checkpointer | None) -> bool:
    """Whether a run on ``saver`` renews its lease from a plain thread, leaving the event
    loop free to be blocked by a lone sync node run inline: when the backend declares that
    its methods work from any loop (:attr:`Capabilities.any_loop`)."""
    return saver is None or saver.capabilities.any_loop


class LeaseRenewer:
    """Keeps a lease alive until stopped, by :meth:`Checkpointer.arenew_lease`.

    For backends whose methods work from any loop, the process's renewal thread renews it
    (see :class:`_RenewalThread`), so a node blocking the loop cannot starve the renewal;
    for other backends a task on ``loop`` does. A renewal never takes a lost lease back: the
    first one that fails (the lease was taken over, or the store failed) ends the renewals
    and is handed to ``on_lost``, so the run stops before its next node, effect or commit
    instead of working for a thread another run may own by now.
    """

    def __init__(
        self, saver: Checkpointer, lease: Lease, on_lost: LostHandler, *, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.saver: Checkpointer | None = saver
        """None once stopped: a renewer waiting in the renewal thread's queue keeps nothing
        of a finished run alive."""
        self.lease = lease
        self.on_lost: LostHandler | None = on_lost
        self.period = max(saver.lease_ttl / 3, 0.02)
        self.renewals = 0
        """How many renewals succeeded (tests wait on it rather than on the clock)."""
        self._task: asyncio.Task[None] | None = None
        self.stopped = False
        self._renewing = threading.Lock()
        """Held through a renewal from the renewal thread, and by :meth:`stop`: a renewal in
        flight when the run ends finishes before the run releases its lease, so it cannot
        land after the release."""
        if renews_off_loop(saver):
            _RenewalThread.get().add(self)
        else:
            self._task = loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.period)
                saver = self.saver
                if saver is None:
                    return
                self.lease = await saver.arenew_lease(self.lease)
                self.renewals += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(exc)

    def renew_blocking(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Renew once from the renewal thread (``loop`` is that thread's own); False when
        the renewal failed or the run is over, which ends this renewer."""
        with self._renewing:
            saver = self.saver
            if saver is None:
                return False
            try:
                self.lease = loop.run_until_complete(saver.arenew_lease(self.lease))
            except Exception as exc:
                self._lost(exc)
                return False
            self.renewals += 1
            return True

    def _lost(self, exc: BaseException) -> None:
        handler, self.on_lost = self.on_lost, None
        if handler is not None:
            handler(exc)

    def stop(self) -> None:
        """End the renewals; returns once no renewal of this run is in flight."""
        with self._renewing:
            self.stopped = True
            self.saver = None
            self.on_lost = None
        if self._task is not None:
            self._task.cancel()


class _RenewalThread:
    """One daemon thread renewing the leases of every run in the process.

    A thread per run would cost a thread start per ``invoke`` (``Thread.start`` waits for
    the new thread to run, a large part of a short resume) and a thread per concurrent run.
    Renewals are due every third of a lease's life, so one thread keeps up with thousands of
    runs; a stopped renewer is dropped when it comes due. After ``fork`` the child starts its
    own thread (threads do not survive a fork).
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
