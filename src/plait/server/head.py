"""HEAD on the JSON API: answered as GET is, without the body.

FastAPI's routes answer only the methods they list, and listing HEAD beside GET on each API
route would put a second operation per path in the OpenAPI document. So a HEAD under
``/api/`` is routed as a GET, and the response keeps its status and headers but ends
right after them. For an event stream that end is the client going away, so the stream
stops too rather than running unread. (The pages list HEAD themselves; static files answer
it already.)
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plait.server.http import route_path

__all__ = ["ApiHead"]

_DISCONNECT: Message = {"type": "http.disconnect"}


class ApiHead:
    """ASGI middleware: HEAD /api/... runs the GET route and sends its head only."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD" or not _is_api(route_path(scope)):
            await self.app(scope, receive, send)
            return
        ended = asyncio.Event()

        async def send_head(message: Message) -> None:
            if ended.is_set():
                return
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                ended.set()

        async def receive_until_ended() -> Message:
            if ended.is_set():
                return _DISCONNECT
            incoming = asyncio.ensure_future(receive())
            waiting = asyncio.ensure_future(ended.wait())
            done, _ = await asyncio.wait({incoming, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if incoming in done:
                waiting.cancel()
                return incoming.result()
            incoming.cancel()
            return _DISCONNECT

        await self.app({**scope, "method": "GET"}, receive_until_ended, send_head)


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")
