"""Thread ids in the Studio's URLs: any id plait accepts (``user/42``, ``a%2Fb``, ``..``,
``é/ü``) opens, and every URL the Studio emits for a thread round-trips to that thread.

ASGI servers hand Starlette a percent-decoded ``path``, so ``/threads/user%2F42/history``
arrives as ``/threads/user/42/history``: a ``{thread_id}`` segment no longer matches, and a
``{thread_id:path}`` one cannot tell the thread ``a/history`` from the history of ``a``.
:class:`ThreadPaths` re-reads such paths from ``raw_path`` and keeps ``/`` and ``%`` escaped
inside each segment, so one segment is one id; the ``thread`` convertor unescapes it.

Browsers (and HTTP clients) resolve ``.`` and ``..`` segments, escaped or not, before a
request is sent, so the ids ``.`` and ``..`` cannot be a path segment at all: their URLs are
``/thread...?tid=ID`` (:func:`thread_target` writes them), which :class:`ThreadPaths` routes
as ``/threads/ID...``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

from plait.server.http import root_of, route_path

__all__ = ["THREAD_ID", "ThreadPaths", "thread_target", "thread_url"]

_PREFIXES = ("/threads/", "/api/threads/")
_BY_QUERY = {"/thread": "/threads", "/api/thread": "/api/threads"}
DOTS = frozenset({".", ".."})
"""The ids no URL path can carry as a segment."""


class _ThreadId(Convertor[str]):
    """One path segment as :class:`ThreadPaths` leaves it (``/`` and ``%`` escaped): the id."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("thread", _ThreadId())
THREAD_ID = "{thread_id:thread}"
"""The path parameter of every route that takes a thread id (importing this module registers
its convertor, so a route module names it through this constant)."""


def _segment(raw: str) -> str:
    return unquote(raw).replace("%", "%25").replace("/", "%2F")


def thread_target(
    thread: str, suffix: str = "", /, *, api: bool = False, **params: str | None
) -> tuple[str, dict[str, str]]:
    """The Studio's path for ``thread`` (plus ``suffix``, e.g. ``/history``) and its query:
    the id as one escaped segment, or, for ``.`` and ``..``, as ``tid=``."""
    base = "/api" if api else ""
    query = {k: v for k, v in params.items() if v}
    if thread in DOTS:
        return f"{base}/thread{suffix}", {"tid": thread, **query}
    return f"{base}/threads/{quote(thread, safe='')}{suffix}", query


def thread_url(thread: str, suffix: str = "", /, *, api: bool = False, **params: str | None) -> str:
    """:func:`thread_target` as one URL (without the Studio's mount path)."""
    path, query = thread_target(thread, suffix, api=api, **params)
    return path + (f"?{urlencode(query)}" if query else "")


class ThreadPaths:
    """Routes a thread's URL by its raw path, so an id is one segment whatever it holds."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = _rerouted(scope)
        await self.app(scope, receive, send)


def _rerouted(scope: Scope) -> Scope:
    root, path = root_of(scope), route_path(scope)
    if path in _BY_QUERY or any(path.startswith(p + "/") for p in _BY_QUERY):
        base = "/api/thread" if path.startswith("/api/") else "/thread"
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        if "tid" not in query:
            return scope
        escaped = quote(query["tid"], safe="").replace(".", "%2E")
        return _with_path(scope, root + _BY_QUERY[base] + "/" + escaped + path[len(base) :])
    if not path.startswith(_PREFIXES):
        return scope
    raw: Any = scope.get("raw_path")
    if not isinstance(raw, bytes):
        return scope
    text = raw.decode("latin-1").split("?", 1)[0]
    raw_root = quote(root, safe="/")
    if root and not text.startswith(raw_root):
        return scope
    raw_path = text[len(raw_root) :] if root else text
    if path not in (unquote(raw_path), unquote(unquote(raw_path))):  # rewritten on the way: keep it
        return scope  # (Starlette's TestClient decodes twice, hence the second form)
    return _with_path(scope, root + "/".join(_segment(s) for s in raw_path.split("/")))


def _with_path(scope: Scope, path: str) -> Scope:
    return {**scope, "path": path}
