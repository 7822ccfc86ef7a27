"""Crons of the API: a run made at each tick of a cron schedule, exactly once per tick.

A cron keeps the run request it was made with (its ``payload``); at each tick a run is made
from it as ``POST /threads/{id}/runs`` makes one (a thread cron's runs go to its thread, one
after another; a stateless cron's each get a new thread). Where crons are kept and who fires
them depends on the store, behind :class:`Crons`:

* :class:`SqliteCrons` (SQLite, file and memory stores): a table of the server's run log and
  a ticker task of the server's own. A tick's run carries ``cron_id`` and ``cron_tick`` in its
  metadata and the cron's ``last_tick`` moves after the run is stored, so a server that
  stopped between the two finds the run when it starts again and does not make it twice.
* :class:`plait.serve.pg_crons.PgCrons` (PostgreSQL): :mod:`plait.runs`' schedules, fired by
  the run queue's workers.

Ticks missed while nothing fired them are fired when the server is back, up to
:data:`CATCH_UP` per cron, as :mod:`plait.runs`' schedules do. Schedules are read in UTC.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import logging
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from plait.errors import AssistantNotFoundError, RunRejectedError, ServeRequestError, ThreadNotFoundError
from plait.serve.sqlite_log import SqliteRunLog
from plait.serve.wire import iso

__all__ = [
    "CATCH_UP",
    "CronRecord",
    "Crons",
    "Fire",
    "SqliteCrons",
    "check_schedule",
    "cron_json",
    "due_ticks",
    "next_run",
    "parse_time",
    "run_body",
    "same_metadata",
]

log = logging.getLogger("plait.serve")

CATCH_UP = 100
"""The most ticks of one cron fired at once, after a time nothing fired them."""

Fire = Callable[[str | None, dict[str, Any]], Awaitable[Any]]
"""Makes a run as ``POST /threads/{thread_id}/runs`` (``None``: ``POST /runs``) makes one
from a request body."""

_CRON_ONLY = ("schedule", "end_time", "enabled", "timezone", "on_run_completed", "webhook", "checkpoint_during")
"""Keys of a cron's payload that are about the cron, not about the runs it makes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CronRecord:
    """One cron of the API."""

    cron_id: str
    assistant_id: str
    graph: str
    thread_id: str | None
    """The thread every tick's run goes to; None: a stateless cron (a new thread each tick)."""
    schedule: str
    """Five fields (minute hour day month weekday), or six with seconds last."""
    payload: dict[str, Any] = field(default_factory=dict)
    """The run request each tick's run is made from (the create request's body)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    on_run_completed: str | None = None
    """A stateless cron's threads: ``delete`` (when the run ends) or ``keep``."""
    end_time: float | None = None
    """No tick after this time (unix seconds) is fired."""
    enabled: bool = True
    timezone: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    last_tick: float = 0.0
    """The latest tick handled (unix seconds): only later ticks are due."""


def _croniter(schedule: str, start: float) -> Any:
    import croniter  # type: ignore[import-untyped]

    return croniter.croniter(schedule, start)


def check_schedule(schedule: Any) -> str:
    """The schedule, refused (:class:`ServeRequestError`, 422) unless it is a cron expression."""
    import croniter

    if not isinstance(schedule, str) or not croniter.croniter.is_valid(schedule):
        raise ServeRequestError(
            "schedule",
            f"{schedule!r} is not a cron expression: use five fields (minute hour day month weekday), "
            "or six with seconds last, e.g. '*/5 * * * *' or '* * * * * */10'",
        )
    return schedule


def due_ticks(schedule: str, after: float, until: float, limit: int = CATCH_UP) -> list[int]:
    """The ticks of ``schedule`` in ``(after, until]`` (unix seconds), the last ``limit`` of them."""
    found: collections.deque[int] = collections.deque(maxlen=limit)
    it = _croniter(schedule, after)
    while (tick := int(it.get_next(float))) <= until:
        found.append(tick)
    return list(found)


def next_run(cron: CronRecord) -> float | None:
    """When the cron's next run is due (None: disabled, or past its end)."""
    if not cron.enabled:
        return None
    due = float(_croniter(cron.schedule, cron.last_tick).get_next(float))
    return None if cron.end_time is not None and due > cron.end_time else due


def run_body(cron: CronRecord, tick: int | None) -> dict[str, Any]:
    """The run request a tick of ``cron`` makes: its payload, the cron's metadata with
    ``cron_id`` (and ``cron_tick`` when given), a stateless cron's ``on_completion``."""
    body = {k: v for k, v in cron.payload.items() if k not in _CRON_ONLY}
    marks: dict[str, Any] = {"cron_id": cron.cron_id} if tick is None else {"cron_id": cron.cron_id, "cron_tick": tick}
    body["metadata"] = {**cron.metadata, **marks}
    if cron.thread_id is None:
        body["on_completion"] = cron.on_run_completed or "delete"
    return body


def cron_json(cron: CronRecord) -> dict[str, Any]:
    """A ``Cron`` as the SDKs read it."""
    due = next_run(cron)
    return {
        "cron_id": cron.cron_id,
        "assistant_id": cron.assistant_id,
        "thread_id": cron.thread_id,
        "on_run_completed": cron.on_run_completed,
        "end_time": None if cron.end_time is None else iso(cron.end_time),
        "schedule": cron.schedule,
        "timezone": cron.timezone,
        "created_at": iso(cron.created_at),
        "updated_at": iso(cron.updated_at),
        "payload": cron.payload,
        "user_id": None,
        "next_run_date": None if due is None else iso(due),
        "metadata": cron.metadata,
        "enabled": cron.enabled,
    }


class Crons(ABC):
    """Where the crons are kept and what fires them; every method is atomic."""

    loop: asyncio.AbstractEventLoop | None = None
    """The server's loop once started (a test fires ticks on it)."""

    async def start(self) -> None:
        """Start firing (after the run log is open)."""
        self.loop = asyncio.get_running_loop()

    @abstractmethod
    async def close(self) -> None:
        """Stop firing (before the runner stops)."""

    @abstractmethod
    def refuse(self, cron: CronRecord) -> None:
        """Raise :class:`ServeRequestError` for a cron this store cannot keep as asked."""

    @abstractmethod
    async def add(self, cron: CronRecord) -> None: ...

    @abstractmethod
    async def all(self) -> list[CronRecord]:
        """Every cron, oldest first."""

    async def get(self, cron_id: str) -> CronRecord | None:
        return next((c for c in await self.all() if c.cron_id == cron_id), None)

    @abstractmethod
    async def save(self, cron: CronRecord) -> bool:
        """Write every field of an existing cron (``last_tick`` never moves back); whether it
        existed."""

    @abstractmethod
    async def remove(self, cron_id: str) -> bool:
        """Forget the cron (the runs it made stay); whether it existed."""

    @abstractmethod
    async def tick(self, now: float) -> int:
        """Fire every tick due at ``now`` (unix seconds), each once; the number of runs made."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS plait_serve_crons (
    cron_id TEXT PRIMARY KEY,
    assistant_id TEXT NOT NULL,
    graph TEXT NOT NULL,
    thread_id TEXT,
    schedule TEXT NOT NULL,
    payload BLOB NOT NULL,
    metadata BLOB NOT NULL,
    on_run_completed TEXT,
    end_time REAL,
    enabled INTEGER NOT NULL,
    timezone TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    last_tick REAL NOT NULL
);
"""

_COLUMNS = (
    "cron_id", "assistant_id", "graph", "thread_id", "schedule", "payload", "metadata", "on_run_completed",
    "end_time", "enabled", "timezone", "created_at", "updated_at", "last_tick",
)  # fmt: skip

_FIRED = (
    "SELECT 1 FROM plait_serve_runs WHERE (? IS NULL OR thread_id = ?) "
    "AND json_extract(CAST(metadata AS TEXT), '$.cron_id') = ? "
    "AND json_extract(CAST(metadata AS TEXT), '$.cron_tick') = ? LIMIT 1"
)


def _row(c: CronRecord) -> tuple[Any, ...]:
    return (
        c.cron_id, c.assistant_id, c.graph, c.thread_id, c.schedule, orjson.dumps(c.payload), orjson.dumps(c.metadata),
        c.on_run_completed, c.end_time, int(c.enabled), c.timezone, c.created_at, c.updated_at, c.last_tick,
    )  # fmt: skip


def _record(row: Sequence[Any]) -> CronRecord:
    values = dict(zip(_COLUMNS, row, strict=True))
    values.update(payload=orjson.loads(row[5]), metadata=orjson.loads(row[6]), enabled=bool(row[9]))
    return CronRecord(**values)


class SqliteCrons(Crons):
    """Crons in the server's SQLite run log, fired by a task of the server every ``every``
    seconds (``clock`` tells the time)."""

    def __init__(
        self, log: SqliteRunLog, fire: Fire, *, clock: Callable[[], float] = time.time, every: float = 1.0
    ) -> None:
        self.log = log
        self.fire = fire
        self.clock = clock
        self.every = every
        self.lock = asyncio.Lock()
        self.checked: set[str] = set()
        """Crons whose ticks this process fired: their ``last_tick`` is known to be right."""
        self.ticker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await super().start()
        await self.log.call(lambda conn: conn.executescript(_SCHEMA))
        self.ticker = asyncio.get_running_loop().create_task(self._run(), name="plait serve crons")

    def refuse(self, cron: CronRecord) -> None:
        """Nothing: the server's own table keeps every cron as asked."""

    async def close(self) -> None:
        if self.ticker is not None:
            self.ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.ticker

    async def _run(self) -> None:
        while True:
            try:
                await self.tick(self.clock())
            except Exception:  # the log failed: the same ticks are due at the next round
                log.exception("firing the crons failed")
            await asyncio.sleep(self.every)

    async def add(self, cron: CronRecord) -> None:
        sql = f"INSERT INTO plait_serve_crons ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        await self.log.write(lambda conn: conn.execute(sql, _row(cron)))

    async def all(self) -> list[CronRecord]:
        sql = f"SELECT {', '.join(_COLUMNS)} FROM plait_serve_crons ORDER BY created_at, cron_id"
        return await self.log.call(lambda conn: [_record(r) for r in conn.execute(sql)])

    async def save(self, cron: CronRecord) -> bool:
        sets = ", ".join(f"{c} = ?" for c in _COLUMNS[1:-1])
        sql = f"UPDATE plait_serve_crons SET {sets}, last_tick = max(last_tick, ?) WHERE cron_id = ?"
        row = _row(cron)
        async with self.lock:
            return bool(await self.log.write(lambda conn: conn.execute(sql, (*row[1:], row[0])).rowcount))

    async def remove(self, cron_id: str) -> bool:
        sql = "DELETE FROM plait_serve_crons WHERE cron_id = ?"
        async with self.lock:
            return bool(await self.log.write(lambda conn: conn.execute(sql, (cron_id,)).rowcount))

    async def tick(self, now: float) -> int:
        fired = 0
        async with self.lock:
            for cron in await self.all():
                if not cron.enabled:
                    continue
                until = now if cron.end_time is None else min(now, cron.end_time)
                for tick in due_ticks(cron.schedule, cron.last_tick, until):
                    if cron.cron_id in self.checked or not await self._fired(cron, tick):
                        fired += await self._fire(cron, tick)
                    self.checked.add(cron.cron_id)
                    await self._handled(cron.cron_id, tick)
        return fired

    async def _handled(self, cron_id: str, tick: int) -> None:
        """Record that ``tick`` of the cron was fired (or skipped): it is not due again."""

        def move(conn: sqlite3.Connection) -> None:
            sql = "UPDATE plait_serve_crons SET last_tick = ? WHERE cron_id = ? AND last_tick < ?"
            conn.execute(sql, (tick, cron_id, tick))

        await self.log.write(move)

    async def _fired(self, cron: CronRecord, tick: int) -> bool:
        """Whether a run of this tick is stored (made before a server stopped, its tick not
        recorded)."""
        params = (cron.thread_id, cron.thread_id, cron.cron_id, tick)

        def find(conn: sqlite3.Connection) -> bool:
            return conn.execute(_FIRED, params).fetchone() is not None

        return await self.log.call(find)

    async def _fire(self, cron: CronRecord, tick: int) -> int:
        try:
            await self.fire(cron.thread_id, run_body(cron, tick))
        except (RunRejectedError, ThreadNotFoundError, AssistantNotFoundError, ServeRequestError) as exc:
            log.warning("cron %s skipped its tick at %s: %s", cron.cron_id, iso(tick), exc)
            return 0
        except BaseException:
            self.checked.discard(cron.cron_id)  # was the run stored? the next try looks first
            raise
        return 1


def parse_time(value: Any, where: str) -> float | None:
    """An ISO 8601 time as unix seconds (UTC when it has no offset); None for None."""
    if value is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        raise ServeRequestError(where, f"{value!r} is not an ISO 8601 time") from None
    if when.utcoffset() is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def same_metadata(cron: CronRecord, wanted: Mapping[str, Any] | None) -> bool:
    return not wanted or all(k in cron.metadata and cron.metadata[k] == v for k, v in wanted.items())
