"""Reading a schedule's cron expression: checking it, its next fire times, and the one
mistake that passes every check, a six-field expression written seconds first.

plait reads cron with croniter: five fields (minute hour day month weekday), or six with the
**seconds last**. Quartz, Spring and APScheduler's ``from_crontab`` habits put seconds
**first**, and such an expression often parses here with another meaning:
``0 */5 * * * *`` (meant: every five minutes) reads as "every second of minute 0 of every
fifth hour", sixty runs in a row. Nothing refuses it, so :func:`seconds_first` recognises
its shape and says what to write instead.

The heuristic, kept narrow so that a real seconds-last expression never trips it: six
fields, the last (seconds, as plait reads it) ``*`` and the first (minute) anything but
``*``. Read as written, that fires on every second of each minute it matches, sixty runs
in a row, which a schedule of graph runs practically never means; written seconds first, it
is the usual "at second S of every ..." with an unrestricted weekday. Six fields whose last
one is a weekday name or a Quartz ``?`` do not parse at all; :func:`check_cron` then says
so, and suggests the seconds-last form.
"""

from __future__ import annotations

import datetime
import warnings
from typing import Any

__all__ = ["CronFieldsWarning", "check_cron", "next_fires", "seconds_first", "ticks"]


class CronFieldsWarning(UserWarning):
    """A schedule's cron expression looks written seconds first (Quartz, APScheduler): it
    was stored, and fires as plait reads it (seconds last), which is likely not what was
    meant. The message says what to write instead."""


def _valid(cron: str) -> bool:
    import croniter  # type: ignore[import-untyped]

    return bool(croniter.croniter.is_valid(cron))


def _seconds_last(fields: list[str]) -> str:
    """The seconds-first ``fields`` as plait reads cron: five fields when the seconds are 0,
    else six with the seconds moved last; a Quartz ``?`` (no specific value) becomes ``*``."""
    second, rest = fields[0], [f.replace("?", "*") for f in fields[1:]]
    return " ".join(rest if second == "0" else [*rest, second])


def check_cron(cron: str) -> None:
    """Refuse a cron expression croniter cannot read, with what is wrong and, for a
    seconds-first expression (Quartz ``0 0 12 * * ?``), what to write instead."""
    if _valid(cron):
        return
    fields = cron.split()
    hint = ""
    if len(fields) in (6, 7):
        fixed = _seconds_last(fields[:6])
        if _valid(fixed):
            hint = f"; if the seconds come first (Quartz, APScheduler), write {fixed!r}"
    raise ValueError(
        f"cron {cron!r} is not a cron expression plait reads: use five fields (minute hour day month weekday), "
        f"or six with seconds last, e.g. '*/5 * * * *' or '* * * * * */10'{hint}"
    )


def seconds_first(cron: str) -> str | None:
    """What to say about a valid ``cron`` that looks written seconds first (see the module
    docstring for the rule), or None when it does not."""
    fields = cron.split()
    if len(fields) != 6 or fields[5] != "*" or fields[0] == "*":
        return None
    fixed = _seconds_last(fields)
    return (
        f"cron {cron!r} has six fields, which plait reads as minute hour day month weekday second (seconds "
        f"last): as written it fires every second, 60 runs in a row, in each minute it matches. If you wrote "
        f"the seconds first (Quartz, APScheduler), write {fixed!r} instead"
    )


def warn_seconds_first(cron: str, *, stacklevel: int = 2) -> None:
    """Warn (:class:`CronFieldsWarning`) when ``cron`` looks written seconds first."""
    said = seconds_first(cron)
    if said is not None:
        warnings.warn(CronFieldsWarning(said), stacklevel=stacklevel + 1)


def next_fires(cron: str, count: int = 3, after: datetime.datetime | None = None) -> list[datetime.datetime]:
    """The next ``count`` times ``cron`` fires after ``after`` (default: now), in UTC: what a
    new schedule will do, to read before it does it."""
    import croniter

    start = after or datetime.datetime.now(datetime.UTC)
    it = croniter.croniter(cron, start.timestamp())
    return [datetime.datetime.fromtimestamp(it.get_next(float), datetime.UTC) for _ in range(count)]


def ticks(cron: str, after: int, until: int, limit: int) -> list[int]:
    """The ticks of ``cron`` in ``(after, until]`` (unix seconds), the last ``limit`` of them."""
    import croniter

    it: Any = croniter.croniter(cron, after)
    found: list[int] = []
    while True:
        t = int(it.get_next(float))
        if t > until:
            break
        found.append(t)
        if len(found) > limit:
            found.pop(0)
    return found
