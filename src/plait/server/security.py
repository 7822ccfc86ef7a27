"""Security for a login-less local tool.

* **Host check** (DNS rebinding): a request whose ``Host`` is not one of the names the
  Studio is served under is refused (421), so a web page on another origin that rebinds its
  name to 127.0.0.1 cannot read the API.
* **Token** (needed for a non-loopback bind): ``Authorization: Bearer T``, ``X-Plait-Token:
  T``, or the cookie that opening ``/?token=T`` once sets (the URL then redirects to itself
  without the token, so it does not stay in the address bar or the history). Compared in
  constant time. The cookie's path is the Studio's mount path (``/studio`` under ``plait
  serve``), so it goes to the Studio only.
* **Writes** (every method but GET/HEAD/OPTIONS) need the CSRF token (header
  ``X-CSRF-Token`` or form field ``csrf_token``; the page carries it, ``GET /api/csrf``
  gives it to a script) and an ``Origin`` equal to the Studio's own.
* **No CORS** headers are ever sent; every response carries a CSP of ``default-src 'self'``
  (and ``frame-ancestors 'none'``), ``nosniff`` and a ``same-origin`` referrer policy (with
  ``no-referrer`` a browser sends ``Origin: null`` on the page's own form posts).
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from plait.server.http import root_of, route_path

__all__ = ["CSRF_FIELD", "CSRF_HEADER", "TOKEN_COOKIE", "Guard", "SecurityMiddleware", "is_loopback"]

CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
TOKEN_COOKIE = "plait_studio_token"
CSP = (
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'"
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address to bind) is this machine only."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """The secrets and names one Studio checks requests against."""

    def __init__(self, *, token: str | None, allowed_hosts: Iterable[str] | None) -> None:
        self.token = token
        self.csrf = secrets.token_urlsafe(32)
        hosts = {h.lower() for h in (allowed_hosts or ())}
        self.allowed_hosts = hosts | set(LOOPBACK_NAMES)

    def host_ok(self, host: str | None) -> bool:
        if not host:
            return False
        name = host.lower()
        if name.startswith("["):
            name = name[: name.find("]") + 1] if "]" in name else name
        elif name.count(":") == 1:
            name = name.split(":", 1)[0]
        return name in self.allowed_hosts or host.lower() in self.allowed_hosts

    def token_ok(self, headers: Headers) -> bool:
        if self.token is None:
            return True
        given = headers.get("x-plait-token", "")
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = given or auth[7:].strip()
        given = given or _cookie(headers, TOKEN_COOKIE)
        return _same(given, self.token)

    def csrf_ok(self, given: str | None) -> bool:
        return _same(given or "", self.csrf)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def _cookie(headers: Headers, name: str) -> str:
    for part in headers.get("cookie", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return ""


def origin_ok(headers: Headers, scheme: str) -> bool:
    """A write's ``Origin`` must be the Studio's own (scheme and Host)."""
    origin = headers.get("origin")
    host = headers.get("host")
    return bool(origin and host) and origin == f"{scheme}://{host}"


class SecurityMiddleware:
    """Host and token checks on every request; security headers on every response. (The CSRF
    and Origin checks of writes are in :func:`plait.server.studio.check_write`, where the form
    body can be read.)"""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self.guard.host_ok(headers.get("host")):
            await _refuse(421, "this Studio does not serve that Host name (DNS rebinding is refused)")(
                scope, receive, send
            )
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        token = self.guard.token
        if token is not None and "token" in query and scope["method"] == "GET":
            if not _same(query["token"], token):
                await _refuse(401, "wrong token: open the URL plait studio printed")(scope, receive, send)
                return
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            root = root_of(scope)
            target = root + route_path(scope) + (f"?{rest}" if rest else "")
            redirect = RedirectResponse(target, status_code=303)
            redirect.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path=root or "/")
            await _secured(redirect)(scope, receive, send)
            return
        if not self.guard.token_ok(headers):
            await _refuse(
                401,
                "this Studio needs its token: open the URL plait studio printed, or send 'Authorization: Bearer TOKEN'",
            )(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = [(k, v) for k, v in message.get("headers", []) if not k.lower().startswith(b"access-control-")]
                raw += _HEADERS
                message = {**message, "headers": raw}
            await send(message)

        await self.app(scope, receive, send_secured)


_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def _secured(response: Response) -> Response:
    for k, v in _HEADERS:
        response.headers[k.decode()] = v.decode()
    return response


def _refuse(status: int, message: str) -> Any:
    return _secured(PlainTextResponse(message + "\n", status_code=status))
