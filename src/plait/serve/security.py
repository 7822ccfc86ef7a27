"""Who may call the API server.

* Bound to 127.0.0.1 by default; ``plait serve`` refuses a public address without an API key.
* **API key**: with one set, every request must carry it in ``x-api-key`` (where the
  LangGraph SDKs send ``LANGGRAPH_API_KEY``), compared in constant time; a wrong or missing
  key is a 401. ``/ok`` answers without it (health checks), and so does a CORS preflight.
* **Host check** (DNS rebinding): a ``Host`` that is not one the server is served under is
  refused (421), as the Studio does.
* **CORS** is off unless origins are named; only those get CORS headers (Starlette's
  middleware), exposing ``content-location`` and ``x-pagination-*`` to a browser app.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from plait.server.security import Guard

__all__ = ["API_KEY_HEADER", "ApiCors", "ApiKeyMiddleware", "EXPOSED_HEADERS", "is_studio"]

API_KEY_HEADER = "x-api-key"
EXPOSED_HEADERS = ("content-location", "location", "x-pagination-total", "x-pagination-next")
_OPEN_PATHS = frozenset({"/ok"})


def is_studio(path: str) -> bool:
    """Whether a request is the mounted Studio's (its own token, CSRF and no-CORS rules)."""
    return path == "/studio" or path.startswith("/studio/")


class ApiCors:
    """CORS for the API's routes only: the named origins get Starlette's CORS answers; the
    Studio under ``/studio`` never sends CORS headers, mounted or not."""

    def __init__(self, app: ASGIApp, *, origins: Iterable[str]) -> None:
        self.app = app
        self.cors = CORSMiddleware(
            app, allow_origins=list(origins), allow_methods=["*"], allow_headers=["*"],
            expose_headers=list(EXPOSED_HEADERS),
        )  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not is_studio(scope["path"]):
            await self.cors(scope, receive, send)
            return
        await self.app(scope, receive, send)


class ApiKeyMiddleware:
    """The Host check and the API key, before any route runs."""

    def __init__(
        self, app: ASGIApp, *, api_key: str | None, allowed_hosts: Iterable[str] | None, cors_origins: Iterable[str]
    ) -> None:
        self.app = app
        self.api_key = api_key
        self.guard = Guard(token=None, allowed_hosts=allowed_hosts)
        self.cors_origins = frozenset(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self.guard.host_ok(headers.get("host")):
            await _refuse(421, "Misdirected", "this server is not served under that Host name")(scope, receive, send)
            return
        preflight = scope["method"] == "OPTIONS" and headers.get("origin") in self.cors_origins
        path = scope["path"]
        if (
            self.api_key is not None
            and not preflight
            and path not in _OPEN_PATHS
            and not is_studio(path)
            and not hmac.compare_digest(headers.get(API_KEY_HEADER, "").encode(), self.api_key.encode())
        ):
            await _refuse(
                401, "Unauthorized", "a missing or wrong API key: send it in the x-api-key header (LANGGRAPH_API_KEY)"
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _refuse(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message, "detail": message}, status_code=status)
