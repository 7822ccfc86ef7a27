"""What the Memory page's tests share: a few items in a store, written at known times."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the Studio needs the studio extra: pip install 'plait[studio]'")

from fastapi.testclient import TestClient  # noqa: E402

from plait import Store  # noqa: E402
from plait.server import StudioConfig, create_app  # noqa: E402

START = 1_800_000_000.0
"""When the first item is written (unix seconds); each later one a second after."""

ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("docs",), "guide", {"kind": "doc", "text": "how to brew"}),
    (("users", "u1", "notes"), "tea", {"kind": "note", "text": "likes green tea", "n": 1}),
    (("users", "u1", "notes"), "coffee", {"kind": "note", "text": "no coffee after noon", "n": 2}),
    (("users", "u1"), "profile", {"kind": "profile", "name": "Ada", "city": {"name": "Oslo"}}),
    (("users", "u2"), "profile", {"kind": "profile", "name": "Bo", "city": {"name": "Bergen"}}),
    (("users", "u2", "notes"), "walk", {"kind": "note", "text": "walks at dawn", "n": 3}),
]
"""Written in this order: the last is the newest."""


class Clock:
    """Unix seconds that move only when a test moves them."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def seed(backend: Any) -> Clock:
    """Write :data:`ITEMS` into ``backend``'s memory, one second apart; the clock they were
    written by (it stands at the last write)."""
    clock = Clock()
    store = Store(backend, clock=clock)
    for i, (ns, key, value) in enumerate(ITEMS):
        clock.now = START + i
        store.put(ns, key, value)
    return clock


def memory_client(checkpointer: Any, store: Store | None = None) -> TestClient:
    app = create_app(checkpointer, config=StudioConfig(allowed_hosts=("testserver",)), store=store)
    return TestClient(app)
