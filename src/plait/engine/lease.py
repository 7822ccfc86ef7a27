"""Keeping a run's lease on its thread alive while the run goes on, and noticing it was lost."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, Lease, RestStatus
from plait.errors import LeaseLostError, ThreadBusyError

__all__ = ["LeaseRenewer", "ThreadLease", "renews_off_loop"]

LostHandler = Callable[[BaseException], None]
"""Told why a renewal failed (a LeaseLostError, or the store's own failure)."""


def renews_off_loop(checkpointer: Checkpointer | None) -> bool:
    """Whether a run on ``checkpointer`` renews its lease from a plain thread, leaving the event
    loop free to be blocked by a lone sync node run inline: when the backend declares that
    its methods work from any loop (:attr:`Capabilities.any_loop`)."""
    return checkpointer is None or checkpointer.capabilities.any_loop


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
        self, checkpointer: Checkpointer, lease: Lease, on_lost: LostHandler, *, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.checkpointer: Checkpointer | None = checkpointer
        """None once stopped: a renewer waiting in the renewal thread's queue keeps nothing
        of a finished run alive."""
        self.lease = lease
        self.on_lost: LostHandler | None = on_lost
        self.period = max(checkpointer.lease_ttl / 3, 0.02)
        self.renewals = 0
        """How many renewals succeeded (tests wait on it rather than on the clock)."""
        self._task: asyncio.Task[None] | None = None
        self.stopped = False
        self._renewing = threading.Lock()
        """Held through a renewal from the renewal thread, and by :meth:`stop`: a renewal in
        flight when the run ends finishes before the run releases its lease, so it cannot
        land after the release."""
        if renews_off_loop(checkpointer):
            _RenewalThread.get().add(self)
        else:
            self._task = loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.period)
                checkpointer = self.checkpointer
                if checkpointer is None:
                    return
                self.lease = await checkpointer.arenew_lease(self.lease)
                self.renewals += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(exc)

    def renew_blocking(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Renew once from the renewal thread (``loop`` is that thread's own); False when
        the renewal failed or the run is over, which ends this renewer."""
        with self._renewing:
            checkpointer = self.checkpointer
            if checkpointer is None:
                return False
            try:
                self.lease = loop.run_until_complete(checkpointer.arenew_lease(self.lease))
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
            self.checkpointer = None
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


log = logging.getLogger("plait.run")


class ThreadLease:
    """A run's hold on its thread, as an ``async with`` block: entering takes the thread's
    lease (waiting up to ``wait`` seconds for a live holder) and reads the checkpoint the run
    starts from, in one round trip where the backend can; inside, the lease is renewed and
    :meth:`check` / :meth:`confirm` say whether it is still the run's; leaving gives it back
    (unless the run's last commit did, or it was lost), leaving the thread ``rest``.

    The engine enters one per run under a minted owner; a worker can enter it with its own
    owner (its claim on the run) so the store names the worker as the holder.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        thread_id: str,
        owner: str,
        *,
        namespace: str = "",
        checkpoint_id: str | None = None,
        wait: float | None = None,
    ) -> None:
        if wait is not None and wait < 0:
            raise ValueError("wait must be a number of seconds (0 or more), or None not to wait")
        self.checkpointer = checkpointer
        self.thread_id = thread_id
        self.owner = owner
        self.namespace = namespace
        self.checkpoint_id = checkpoint_id
        self.wait = wait
        self.lease: Lease | None = None
        """The lease held (None before entering); its token fences every commit."""
        self.head: Checkpoint | None = None
        """The checkpoint read on entering (``checkpoint_id``'s, or the thread's head)."""
        self.error: BaseException | None = None
        """Why the run may not write any more (its lease was lost, or renewing it failed)."""
        self.rest: RestStatus | None = None
        """How the run leaves the thread, given back with the lease (None: as it was)."""
        self.released = False
        """Set when a commit gave the lease back (the run's last commit does)."""
        self._renewer: LeaseRenewer | None = None

    async def __aenter__(self) -> ThreadLease:
        loop = asyncio.get_running_loop()
        self.lease, self.head = await self._take(loop)
        self._renewer = LeaseRenewer(self.checkpointer, self.lease, self.lost, loop=loop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop_renewing()
        await self._give_back()

    async def _take(self, loop: asyncio.AbstractEventLoop) -> tuple[Lease, Checkpoint | None]:
        deadline = None if self.wait is None else loop.time() + self.wait
        pause = 0.05
        while True:
            try:
                return await self.checkpointer.atake_lease_and_get(
                    self.thread_id, self.owner, self.checkpoint_id, namespace=self.namespace
                )
            except ThreadBusyError as busy:
                left = 0.0 if deadline is None else deadline - loop.time()
                if left <= 0:
                    raise
                log.info("waiting for thread %r (%s); %.1fs left", self.thread_id, busy.owner, left)
                await asyncio.sleep(min(left, pause, max(busy.expires_in, 0.01)))
                pause = min(pause * 2, 0.5)

    def check(self) -> None:
        """Refuse to go on once the lease is lost: another run may own the thread now.

        Raises:
            LeaseLostError: (or the store's failure to renew) the run must stop.
        """
        if self.error is not None:
            raise self.error

    def lost(self, exc: BaseException) -> None:
        """The renewer's report: renewing failed; the run writes nothing more."""
        if self.error is None:
            self.error = exc

    async def confirm(self) -> None:
        """Check with the store that the lease is still the thread's current one (by renewing
        it), right before a side effect runs: a run that lost its thread must not charge a
        card the new owner will charge again.

        Raises:
            LeaseLostError: the lease was lost (the run stops at once).
        """
        self.check()
        if self.lease is None:
            return
        try:
            self.lease = await self.checkpointer.arenew_lease(self.lease)
        except LeaseLostError as exc:
            self.error = exc
            raise

    def stop_renewing(self) -> None:
        """No renewal starts after this (the run's last commit is about to release)."""
        if self._renewer is not None:
            self._renewer.stop()

    async def _give_back(self) -> None:
        """Release the lease (unless a commit did, or it was lost). A release that fails is
        logged, not raised: the run's outcome stands, and the lease ends by itself (at once
        for a new run on this machine once this process is gone, see
        :class:`~plait.checkpoint.holder.Holder`)."""
        lease = self.lease
        if lease is None or self.released or isinstance(self.error, LeaseLostError):
            return
        try:
            await self.checkpointer.arelease_lease(lease, status=self.rest)
        except Exception as exc:
            log.warning("could not give back the lease on thread %r: %s", lease.thread_id, exc)
