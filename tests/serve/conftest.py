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

from ._serve_support import ENTERED, GATES, served  # noqa: E402


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with served(str(tmp_path / "serve.db")) as base:
        yield base


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
