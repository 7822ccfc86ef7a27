"""Applying the retention policy in the background: what ``plait worker`` and ``plait serve``
run beside their work, every ``--retention-sweep`` seconds.

Each turn is one :meth:`Checkpointer.asweep <plait.checkpoint.base.Checkpointer.asweep>`: the
policy in effect then (the checkpointer's ``retention=``, else the one stored in the database,
which ``plait db retention`` may have changed since the last turn) and each thread's own. On
PostgreSQL several processes may run one; the advisory lock lets one sweep at a time, and a
turn that finds it held is counted under :attr:`RetentionSweeper.held_elsewhere`. A turn that
fails (the database is away, a stored policy is damaged) is logged and tried again at the next
interval, never ending the process that runs it.

Each turn also removes the node cache's expired entries (:meth:`NodeCache.asweep
<plait.checkpoint.cache.NodeCache.asweep>`), which reads skip but would otherwise keep.

Time enters only through ``sleep``, so tests drive a sweeper turn by turn with a sleep they
release by hand, never by waiting on the wall clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.retention import SweepReport
from plait.errors import CacheUnsupportedError
from plait.store.sweeper import Periodic

__all__ = ["DEFAULT_RETENTION_SWEEP", "RetentionSweeper"]

log = logging.getLogger("plait.checkpoint.retention")

DEFAULT_RETENTION_SWEEP = 3600.0
"""Seconds between retention sweeps of ``plait worker`` and ``plait serve`` unless told."""


class RetentionSweeper(Periodic):
    """Sweeps ``checkpointer`` by its retention policy at start and then every ``every``
    seconds, until stopped.

    Args:
        checkpointer: the store to sweep.
        every: seconds between sweeps (above zero).
        sleep: waits the given seconds (default :func:`asyncio.sleep`; tests pass their own).
    """

    task_name = "plait retention sweeper"

    def __init__(
        self,
        checkpointer: Checkpointer,
        *,
        every: float = DEFAULT_RETENTION_SWEEP,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int | float) or not every > 0:
            raise ValueError(f"every={every!r}: give a positive number of seconds")
        super().__init__(float(every), sleep)
        self.checkpointer = checkpointer
        self.last_report: SweepReport | None = None
        """What the latest sweep that ran did."""
        self.held_elsewhere = 0
        """Turns that found another process sweeping the database (PostgreSQL)."""
        self.cache_swept = 0
        """Expired node-cache entries removed (see :mod:`plait.checkpoint.cache`)."""

    async def sweep_once(self) -> SweepReport | None:
        """One sweep: its report, or None when it failed (logged, not raised)."""
        report: SweepReport | None = None
        try:
            report = await self.checkpointer.asweep()
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            log.warning(
                "the retention sweep of %r failed (%s: %s); trying again in %g seconds",
                self.checkpointer,
                type(exc).__name__,
                exc,
                self.interval,
            )
        else:
            self.last_error = None
            self.last_report = report
            if report.held_elsewhere:
                self.held_elsewhere += 1
                log.info("another process is sweeping %r; this turn skipped", self.checkpointer)
            elif report.deleted or report.reduced:
                log.info(
                    "retention: deleted %d thread(s), reduced %d, removed %d checkpoint(s) of %r",
                    len(report.deleted),
                    len(report.reduced),
                    report.checkpoints_removed,
                    self.checkpointer,
                )
        await self._sweep_cache()
        await self._counted()
        return report

    async def _sweep_cache(self) -> None:
        """Remove the expired entries of the checkpointer's node cache (reads skip them; this
        gives their room back). A backend without one is skipped; a failure is logged."""
        try:
            self.cache_swept += await self.checkpointer.cache.asweep()
        except CacheUnsupportedError:
            return
        except Exception as exc:
            log.warning("the node cache sweep of %r failed (%s: %s)", self.checkpointer, type(exc).__name__, exc)
