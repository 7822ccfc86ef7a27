"""Deleting a store's expired items in the background: what ``plait worker`` and ``plait serve``
run beside their work.

Expired items are invisible to every read at once; a sweep only gives their rows back, so
nothing depends on when it runs, and a sweep that fails (the database is away) is logged and
tried again at the next interval, never ending the process that runs it. The first sweep runs
at start: a process restarted more often than its interval still sweeps.

Time enters only through ``sleep`` (and the store's own ``clock``), so tests drive a sweeper
step by step with a sleep they release by hand, never by waiting on the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Self

from plait.store.store import Store

__all__ = ["DEFAULT_SWEEP_MINUTES", "Periodic", "Sweeper"]

log = logging.getLogger("plait.store.sweeper")

DEFAULT_SWEEP_MINUTES = 60.0
"""Minutes between sweeps when neither the caller nor the store's ``ttl`` config says."""


class Periodic:
    """A sweep run at start and then every :attr:`interval` seconds, until stopped: the loop
    that the memory store's :class:`Sweeper` and the checkpoints' retention sweeper
    (:class:`plait.checkpoint.sweeper.RetentionSweeper`) share. A subclass implements
    :meth:`sweep_once`, which logs its failures and never raises, and calls :meth:`_counted`
    after each.

    Use it as ``async with sweeper:`` or with :meth:`start` and :meth:`astop`.
    """

    task_name = "plait sweeper"
    """The name of the task :meth:`start` runs it in."""

    def __init__(self, interval: float, sleep: Callable[[float], Awaitable[object]]) -> None:
        self.interval = interval
        """Seconds between sweeps."""
        self.sweeps = 0
        """Sweeps tried so far (failed ones too)."""
        self.failures = 0
        self.last_error: Exception | None = None
        """Why the latest failed sweep failed (None once one succeeds again)."""
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    async def sweep_once(self) -> object:
        """One sweep (a subclass's): logs a failure, never raises."""
        raise NotImplementedError

    async def _counted(self) -> None:
        """Count a sweep tried and wake :meth:`wait_sweeps`."""
        self.sweeps += 1
        async with self._changed:
            self._changed.notify_all()

    async def arun(self) -> None:
        """Sweep now and after every interval, until cancelled."""
        while True:
            await self.sweep_once()
            await self._sleep(self.interval)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Run :meth:`arun` in a task of the running event loop (again after :meth:`astop`)."""
        if self.running:
            return
        self._task = asyncio.get_running_loop().create_task(self.arun(), name=self.task_name)

    async def astop(self) -> None:
        """Stop sweeping; a sweep in flight is cancelled (its transaction is rolled back)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def wait_sweeps(self, count: int) -> None:
        """Return once :attr:`sweeps` reached ``count`` (how a test or a health check knows a
        sweep happened without watching the clock)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.sweeps >= count)

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()


class Sweeper(Periodic):
    """Sweeps ``store`` (``store.asweep()``) at start and then every ``every_minutes``, until
    stopped.

    Args:
        store: the store whose expired items go (its backend's database: every namespace).
        every_minutes: minutes between sweeps (default: the store's
            ``ttl={"sweep_interval_minutes": ...}``, 60 unless set).
        sleep: waits the given seconds (default :func:`asyncio.sleep`; tests pass their own).

    Use it as ``async with Sweeper(store):`` or with :meth:`start` and :meth:`astop`.
    """

    task_name = "plait memory sweeper"

    def __init__(
        self,
        store: Store,
        *,
        every_minutes: float | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        minutes = store.sweep_interval_minutes if every_minutes is None else every_minutes
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not minutes > 0:
            raise ValueError(f"every_minutes={every_minutes!r}: give a positive number of minutes")
        super().__init__(float(minutes) * 60.0, sleep)
        self.store = store
        self.swept = 0
        """Expired items deleted so far."""

    @classmethod
    def of(
        cls,
        store: Store,
        others: Iterable[Store | None] = (),
        *,
        every_minutes: float | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> Sweeper:
        """The sweeper of ``store``'s database, at the shortest interval that ``others`` over
        the same backend ask for, else at ``store``'s own.

        ``others`` are the stores a server's or worker's graphs use, bound to its
        checkpointer: a graph compiled with ``Store(cp, ttl={"sweep_interval_minutes": 5})``
        makes it sweep every 5 minutes. Stores elsewhere (None, another database) are not
        this sweeper's to sweep. ``every_minutes`` overrides them all.
        """
        same = [s for s in others if s is not None and s.backend is store.backend] or [store]
        return cls(min(same, key=lambda s: s.sweep_interval_minutes), every_minutes=every_minutes, sleep=sleep)

    async def sweep_once(self) -> int | None:
        """One sweep: how many items went, or None when it failed (logged, not raised)."""
        count: int | None = None
        try:
            swept = await self.store.asweep()
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            log.warning(
                "sweeping expired memory items of %r failed (%s: %s); trying again in %g minutes",
                self.store,
                type(exc).__name__,
                exc,
                self.interval / 60,
            )
        else:
            count = swept
            self.swept += swept
            self.last_error = None
            if swept:
                log.info("swept %d expired memory item(s) of %r", swept, self.store)
        await self._counted()
        return count
