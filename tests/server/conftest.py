"""Studio fixtures: a store holding a few threads of a small graph, and the app over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the Studio needs the studio extra: pip install 'plait[studio]'")

from fastapi.testclient import TestClient  # noqa: E402

from plait import Command, SqliteCheckpointer  # noqa: E402

from ._studio_support import compiled, make_client  # noqa: E402


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite store with thread ``waiting`` (paused on its interrupt) and ``done`` (finished)."""
    path = str(tmp_path / "studio.db")
    saver = SqliteCheckpointer(path)
    app = compiled(saver)
    app.invoke({"topic": "rivers"}, thread_id="waiting")
    app.invoke({"topic": "lakes"}, thread_id="done")
    app.invoke(Command(resume="yes"), thread_id="done")
    saver.close()
    return path


@pytest.fixture
def saver(db: str) -> Iterator[SqliteCheckpointer]:
    s = SqliteCheckpointer(db)
    yield s
    s.close()


@pytest.fixture
def client(saver: SqliteCheckpointer) -> Iterator[TestClient]:
    with make_client(saver) as c:
        yield c


@pytest.fixture
def bare(saver: SqliteCheckpointer) -> Iterator[TestClient]:
    """The Studio without a graph."""
    with make_client(saver, graphs=False) as c:
        yield c
