"""The run queue under the Studio tests: the graphs and `plait worker` helpers of tests/runs,
reused (imported from that package; nothing is copied), and
the Studio over a PostgreSQL schema that has the queue.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from plait import PostgresCheckpointer

from ..runs import _run_flows as flows
from ..runs._runs_support import ledger_lines, plait_worker, started, wait_for
from ._studio_support import make_client

__all__ = ["flows", "ledger_lines", "plait_worker", "started", "studio_on", "wait_for"]


def studio_on(dsn: str, schema: str, **config: Any) -> tuple[TestClient, PostgresCheckpointer]:
    """The Studio (its TestClient, not entered yet) over the checkpoints of ``schema``, and
    the store, for the test to close."""
    store = PostgresCheckpointer(dsn, schema=schema)
    return make_client(store, graphs=False, **config), store
