"""The run queue under the Studio tests: the graphs and `plait worker` helpers of tests/runs,
reused (imported from that folder, which is put on the path here; nothing is copied), and
the Studio over a PostgreSQL schema that has the queue.

A plain module with a name no other test folder uses (like ``_studio_support``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

RUNS_TESTS = str(Path(__file__).resolve().parents[1] / "runs")
if RUNS_TESTS not in sys.path:
    sys.path.append(RUNS_TESTS)  # appended: tests/runs' own modules never shadow this folder's

import _run_flows as flows  # noqa: E402
from _runs_support import ledger_lines, plait_worker, started, wait_for  # noqa: E402
from _studio_support import make_client  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from plait import PostgresCheckpointer  # noqa: E402

__all__ = ["flows", "ledger_lines", "plait_worker", "started", "studio_on", "wait_for"]


def studio_on(dsn: str, schema: str, **config: Any) -> tuple[TestClient, PostgresCheckpointer]:
    """The Studio (its TestClient, not entered yet) over the checkpoints of ``schema``, and
    the store, for the test to close."""
    store = PostgresCheckpointer(dsn, schema=schema)
    return make_client(store, graphs=False, **config), store
