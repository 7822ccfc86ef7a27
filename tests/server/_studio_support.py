"""What the Studio tests share: a small graph with an interrupt, the app over a store
(TestClient), an app the Studio is mounted in (as ``plait serve`` mounts it), and a real
uvicorn server on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the Studio needs the studio extra: pip install 'plait[studio]'")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from plait import (  # noqa: E402
    END,
    START,
    AppendList,
    AppendMessages,
    CompiledGraph,
    Graph,
    MergeMap,
    StateSchema,
    interrupt,
)
from plait.server import StudioConfig, create_app, studio_lifespan  # noqa: E402

ORIGIN = "http://testserver"


def schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add_lww("topic")
        .add_lww("style", default="long")
        .add("messages", AppendMessages())
        .add("notes", AppendList())
        .add("sources", MergeMap())
        .add_lww("answer")
        .build()
    )


def research(state: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "notes": [f"{state['style']} note on {state['topic']}"],
        "sources": {"web": 2},
        "messages": [{"id": "m1", "role": "tool", "content": "found"}],
    }


def ask(state: Mapping[str, Any]) -> dict[str, Any]:
    answer = interrupt({"ask": "publish?", "notes": list(state["notes"])})
    return {"answer": answer, "messages": [{"id": "m2", "role": "user", "content": str(answer)}]}


def build_graph() -> Graph:
    g = Graph(schema())
    g.add_node("research", research).add_node("ask", ask)
    g.add_edge(START, "research").add_edge("research", "ask").add_edge("ask", END)
    return g


def compiled(saver: Any) -> CompiledGraph:
    return build_graph().compile(checkpointer=saver, name="small")


def make_client(saver: Any, *, graphs: bool = True, **config: Any) -> TestClient:
    config.setdefault("allowed_hosts", ("testserver",))
    app = create_app(saver, [compiled(None)] if graphs else None, config=StudioConfig(**config))
    return TestClient(app)


def write_headers(c: TestClient) -> dict[str, str]:
    token = c.get("/api/csrf").json()["csrf_token"]
    return {"Origin": ORIGIN, "X-CSRF-Token": token}


MOUNT = "/studio"
ELSEWHERE = 418
"""What the host answers outside the Studio: a URL that missed the mount path gets this."""


def mounted(studio: FastAPI, path: str = MOUNT) -> FastAPI:
    """An app with ``studio`` mounted at ``path``, as ``plait serve`` mounts it: its lifespan
    runs the Studio's (:func:`studio_lifespan`), and every other path is the host's own (a
    418 naming the path), so a link or a redirect that missed the mount path fails loudly."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with studio_lifespan(studio):
            yield

    host = FastAPI(lifespan=lifespan)
    host.mount(path, studio)

    @host.api_route("/{rest:path}", methods=["GET", "POST", "DELETE"])
    async def elsewhere(request: Request, rest: str) -> JSONResponse:
        return JSONResponse({"host": f"/{rest}", "method": request.method}, status_code=ELSEWHERE)

    return host


def mounted_client(saver: Any, *, graphs: bool = True, **config: Any) -> TestClient:
    """A TestClient of an app with the Studio over ``saver`` mounted at :data:`MOUNT`."""
    config.setdefault("allowed_hosts", ("testserver",))
    studio = create_app(saver, [compiled(None)] if graphs else None, config=StudioConfig(**config))
    return TestClient(mounted(studio))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LiveServer:
    """The Studio served by uvicorn on 127.0.0.1 in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the Studio did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
