"""Fixtures of the crash tests; the harness they hand out (the child launcher, the stores
the children write, the uninterrupted reference run) is tests/crash/_harness.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from ._harness import Launcher, Reference, Store, child_module, open_launcher, run_reference

collect_ignore = ["crash_child.py", "func_child.py"]


@pytest.fixture(scope="session")
def crash_child() -> ModuleType:
    """tests/crash/crash_child.py, imported (the graphs, their invariants, At and Event,
    open_checkpointer)."""
    return child_module


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """Children from a zygote when this platform can fork, else (or with
    PLAIT_CRASH_LAUNCHER=spawn) one fresh process each. Their stderr goes to
    ``tmp_path/children.err`` (shown when a child fails)."""
    yield from open_launcher(tmp_path / "children.err")


@pytest.fixture
def other_launcher(tmp_path: Path) -> Iterator[Launcher]:
    """A second launcher, for a second child running at the same time as the first (a
    zygote runs one child at a time). Its children's stderr goes to ``other-children.err``."""
    yield from open_launcher(tmp_path / "other-children.err")


@pytest.fixture(params=["sqlite", "file", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each backend in turn, empty; Postgres on the shared server, in a schema of its own."""
    backend: str = request.param
    if backend == "sqlite":
        pytest.importorskip("plait.checkpoint.sqlite")
        yield Store("sqlite", str(tmp_path / "crash.sqlite"))
    elif backend == "file":
        pytest.importorskip("plait.checkpoint.file")
        yield Store("file", str(tmp_path / "crash-store"))
    else:
        pytest.importorskip("plait.checkpoint.postgres")
        dsn: str = request.getfixturevalue("postgres_dsn")
        schema: str = request.getfixturevalue("postgres_schema")
        import psycopg
        from psycopg.conninfo import make_conninfo

        tag = f"plait-crash-{schema}"
        with psycopg.connect(dsn, autocommit=True) as watcher:

            def settled() -> bool:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
                ).fetchone()
                return row is not None and row[0] == 0

            yield Store(
                "postgres",
                make_conninfo(dsn, application_name=tag),
                pg_schema=schema,
                reader_location=dsn,
                settled=settled,
            )


@pytest.fixture(scope="session")
def reference() -> Reference:
    """The loop graph's uninterrupted run, once per session."""
    return run_reference()
