"""schemathesis against /openapi.json: generated requests to every route (writes carrying the
Origin and CSRF token, so they reach the handlers) get no 500 and no undocumented answer."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is in the dev extra")

from _studio_support import ORIGIN, compiled  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis import checks  # noqa: E402

from plait import Command, SqliteCheckpointer  # noqa: E402
from plait.server import StudioConfig, create_app  # noqa: E402


def _app():  # type: ignore[no-untyped-def]
    folder = Path(tempfile.mkdtemp(prefix="plait-schema-"))
    saver = SqliteCheckpointer(folder / "s.db")
    g = compiled(saver)
    g.invoke({"topic": "a"}, thread_id="waiting")
    g.invoke({"topic": "b"}, thread_id="done")
    g.invoke(Command(resume="y"), thread_id="done")
    return create_app(saver, [compiled(None)], config=StudioConfig(allowed_hosts=("testserver", "localhost")))


APP = _app()
CSRF = APP.state.studio.guard.csrf
schema = schemathesis.openapi.from_asgi("/openapi.json", APP).exclude(path_regex=r"/events($|/)")


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_keeps_to_its_schema(case: schemathesis.Case) -> None:
    # Thread ids, checkpoint ids and cursors are opaque strings in the schema, and most drawn
    # at random name nothing stored: a 400/404 for them is right, not a rejected valid request.
    case.call_and_validate(
        headers={"Origin": ORIGIN, "X-CSRF-Token": CSRF, "Host": "testserver"},
        excluded_checks=[checks.positive_data_acceptance],
    )
