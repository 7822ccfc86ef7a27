"""Fixtures of the API server's tests: a served SQLite store and the SDK's sync client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="plait serve needs the serve extra: pip install 'plait[serve]'")
pytest.importorskip("langgraph_sdk", reason="the SDK tests need langgraph-sdk (the dev extra pins it)")

from langgraph_sdk import get_sync_client  # noqa: E402
from langgraph_sdk.client import SyncLangGraphClient  # noqa: E402

from plait.serve.app import ServeConfig  # noqa: E402

from ._serve_support import ENTERED, GATES, served  # noqa: E402


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A served store: a SQLite file (the server runs the runs), or a PostgreSQL schema of
    its own (one worker of the run queue in the server's process runs them)."""
    if request.param == "sqlite":
        with served(str(tmp_path / "serve.db")) as base:
            yield base
        return
    from plait.checkpoint import open as open_store

    dsn, schema = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("postgres_schema")
    store = open_store(dsn, schema=schema)
    try:
        with served(store, config=ServeConfig(workers=1)) as base:
            yield base
    finally:
        store.close()


@pytest.fixture
def client(url: str) -> Iterator[SyncLangGraphClient]:
    with get_sync_client(url=url, api_key=None) as c:
        yield c


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """A gate named ``hold``: a run whose last message is ``hold`` waits in its first node
    until the test sets it (released at the end whatever happens)."""
    event = threading.Event()
    GATES["hold"] = event
    ENTERED["hold"] = threading.Event()
    yield event
    event.set()
    GATES.pop("hold", None)
    ENTERED.pop("hold", None)
