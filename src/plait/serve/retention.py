"""How long a run's stream events are kept: ``ttl`` seconds after the run ends (default one
hour), then dropped, by a sweep at the server's start and every ``every`` seconds after. The
checkpoints keep only the finished message of a streamed answer, and the run record its
outcome; a client that rejoins a run whose events went gets the run's end at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from plait.serve.log import RunLog

__all__ = ["sweep_events"]

log = logging.getLogger("plait.serve")


async def sweep_events(
    runs: RunLog, ttl: float, *, every: float | None = None, clock: Callable[[], float] = time.time
) -> None:
    """Drop the events of runs that ended more than ``ttl`` seconds ago, now and then every
    ``every`` seconds (default: a quarter of ``ttl``, at most five minutes) until cancelled."""
    pause = every if every is not None else min(max(ttl / 4, 1.0), 300.0)
    while True:
        with contextlib.suppress(Exception):  # a store that failed now is swept at the next turn
            dropped = await runs.drop_events(clock() - ttl)
            if dropped:
                log.info("dropped the stream events of runs that ended over %gs ago (%d events)", ttl, dropped)
        await asyncio.sleep(pause)
