"""What every route of the Studio answers with: its JSON responses, its refusals and the
status each plait error maps to, and the form body the page's forms post.

Below every router and the app (Starlette keeps ``routing.py`` free of ``applications.py``
the same way): a route module imports this, never :mod:`plait.server.app`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Scope

from plait._frozen import thaw
from plait.errors import (
    CheckpointNotFoundError,
    ConcurrentUpdateError,
    LeaseLostError,
    NoRunQueueError,
    PlaitError,
    RunNotFoundError,
    StoreUnsupportedError,
    ThreadBusyError,
    ThreadExistsError,
)

__all__ = ["StudioRefusal", "error_response", "json_response", "read_form", "root_of", "route_path", "status_of"]


class StudioRefusal(Exception):
    """A request refused by the Studio itself (a bad Origin, a missing CSRF token)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


async def read_form(request: Request) -> dict[str, str]:
    """A URL-encoded form body (the page's forms are nothing else), each field's last value."""
    cached: dict[str, str] | None = getattr(request.state, "form", None)
    if cached is None:
        body = (await request.body()).decode("utf-8", "replace")
        cached = dict(parse_qsl(body, keep_blank_values=True))
        request.state.form = cached
    return cached


def root_of(scope: Scope) -> str:
    """Where the Studio is mounted: ``""`` at the root of its own server, ``"/studio"`` under
    ``plait serve`` (the ASGI ``root_path`` Starlette sets for a mounted app). Every URL the
    Studio emits (links, forms, redirects, assets, its cookie's path) starts with it."""
    return str(scope.get("root_path", "")).rstrip("/")


def route_path(scope: Scope) -> str:
    """The request's path inside the Studio, without the mount path. (ASGI servers and
    Starlette put the mount path in ``path`` too; an older server may not.)"""
    path: str = scope["path"]
    root = root_of(scope)
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


def status_of(exc: PlaitError) -> int:
    if isinstance(exc, CheckpointNotFoundError | RunNotFoundError | NoRunQueueError | StoreUnsupportedError):
        return 404
    if isinstance(exc, ThreadBusyError | ConcurrentUpdateError | ThreadExistsError | LeaseLostError):
        return 409
    return 400


def error_response(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message}, status_code=status)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(thaw(data), default=str), status_code=status, media_type="application/json")
