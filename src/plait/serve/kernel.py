"""What every route of the API server shares: the server's parts, the body reader, the
error shape, and how a thread is shown (its record, state and status together).

Below the routers and the app (as :mod:`plait.server.http` is for the Studio): a route
module imports this, never :mod:`plait.serve.app`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from plait.checkpoint.base import Checkpointer
from plait.errors import (
    AssistantNotFoundError,
    CheckpointMetadataReadOnlyError,
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    InvalidMemoryError,
    InvalidNamespaceError,
    MemoryFilterError,
    PlaitError,
    RunNotFoundError,
    ServeRequestError,
    StateValidationError,
    ThreadBusyError,
    ThreadExistsError,
    ThreadNotFoundError,
)
from plait.graph.records import ThreadState
from plait.serve.assistants import Assistants
from plait.serve.executor import RunExecutor
from plait.serve.log import RunLog
from plait.serve.records import ThreadRecord
from plait.serve.streams import Notifier
from plait.serve.wire import json_response, thread_json
from plait.store import Store

__all__ = ["Server", "error_response", "read_body", "server_of", "status_of"]


@dataclass(kw_only=True)
class Server:
    """The parts of one ``plait serve``: its store, its graphs, its run log and runner, its
    memory store."""

    checkpointer: Checkpointer
    assistants: Assistants
    log: RunLog
    runner: RunExecutor
    notifier: Notifier
    memory: Store | None = None
    """The memory store ``/store`` serves and the graphs' ``ctx.store`` writes to (None: the
    checkpointer keeps none)."""
    clock: Callable[[], float] = time.time
    started_at: float = field(default_factory=time.time)

    async def thread_record(self, thread_id: str) -> ThreadRecord:
        """The thread's record; a thread the store has but the log does not (written by
        ``invoke`` or another tool) is shown with empty metadata.

        Raises:
            ThreadNotFoundError: neither has it.
        """
        record = await self.log.get_thread(thread_id)
        if record is not None:
            return record
        info = await self.checkpointer.aget_thread(thread_id)
        if info is None:
            raise ThreadNotFoundError(thread_id)
        return ThreadRecord(thread_id=thread_id, metadata={}, created_at=info.created_at, updated_at=info.updated_at)

    async def state(self, thread_id: str, checkpoint_id: str | None = None) -> ThreadState | None:
        cp = await self.checkpointer.aget(thread_id, checkpoint_id)
        return None if cp is None else ThreadState.of(cp)

    async def status(self, thread_id: str, state: ThreadState | None) -> str:
        """``busy`` while a run is pending or running, else how the store sees the thread."""
        if await self.log.active_runs(thread_id):
            return "busy"
        if state is None:
            return "idle"
        if state.interrupts:
            return "interrupted"
        info = await self.checkpointer.aget_thread(thread_id)
        if info is not None and info.status == "error":
            return "error"
        return "idle"

    async def thread_doc(self, record: ThreadRecord, select: list[str] | None = None) -> dict[str, Any]:
        state = await self.state(record.thread_id)
        return thread_json(record, state, await self.status(record.thread_id, state), select=select)


def server_of(request: Request) -> Server:
    server: Server = request.app.state.serve
    return server


async def read_body(request: Request) -> dict[str, Any]:
    """The request's JSON object ({} for an empty body).

    Raises:
        ServeRequestError: not JSON, or not an object.
    """
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ServeRequestError("request body", f"is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ServeRequestError("request body", "must be a JSON object")
    return body


def status_of(exc: PlaitError) -> int:
    """The HTTP status of a refusal. Every other plait error (a server whose checkpointer keeps
    no memory store too) is a 400: never a 5xx, which the JS SDK retries four times over some
    15 s although the answer cannot change."""
    if isinstance(exc, AssistantNotFoundError | ThreadNotFoundError | CheckpointNotFoundError | RunNotFoundError):
        return 404
    if isinstance(exc, ThreadBusyError | ConcurrentUpdateError | ThreadExistsError | CheckpointMetadataReadOnlyError):
        return 409
    if isinstance(
        exc, ServeRequestError | InvalidNamespaceError | InvalidMemoryError | MemoryFilterError | StateValidationError
    ):  # (a value the graph's state model refuses: the SDKs raise UnprocessableEntityError)
        return 422
    return 400


def error_response(status: int, kind: str, message: str) -> Response:
    """An error as the SDKs read it: they raise their exception with ``message``."""
    return json_response({"error": kind, "message": message, "detail": message}, status)
