"""The API's routes as plain Starlette routes, declared as FastAPI's are.

Every endpoint of the API takes its path parameters (strings) and the request, and returns
a response it built itself: nothing of FastAPI's per-request machinery (dependency solving,
parameter validation, its nested matching of included routers) has anything to do, yet it
cost about 0.1 ms a request, a sixth of a one-node run's CPU in the server. So the route
modules declare their endpoints on a :class:`Routes` (``@router.post("/threads")``, as
before), and the app adds them to its router as Starlette routes: matched in the order
declared, a path that matches with another method answered 405, as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["Routes"]

Endpoint = Callable[..., Awaitable[Response]]


class Routes:
    """A module's endpoints, in the order declared."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def get(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self._method(path, "GET")

    def post(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self._method(path, "POST")

    def put(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self._method(path, "PUT")

    def patch(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self._method(path, "PATCH")

    def delete(self, path: str) -> Callable[[Endpoint], Endpoint]:
        return self._method(path, "DELETE")

    def _method(self, path: str, method: str) -> Callable[[Endpoint], Endpoint]:
        def add(fn: Endpoint) -> Endpoint:
            self.routes.append(Route(path, _endpoint(fn), methods=[method], name=fn.__name__))
            return fn

        return add


def _endpoint(fn: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """``fn(**path_params, request=request)`` as a Starlette endpoint (without ``request``
    when ``fn`` takes none)."""
    if "request" in inspect.signature(fn).parameters:

        async def with_request(request: Request) -> Response:
            params: dict[str, Any] = request.path_params
            return await fn(request=request, **params)

        return with_request

    async def bare(request: Request) -> Response:
        params: dict[str, Any] = request.path_params
        return await fn(**params)

    return bare
