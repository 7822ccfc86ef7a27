"""The Studio's edits to a thread whose state is a Pydantic model: an edit and a fork with
edits are validated as the library validates them (LangGraph's Studio sent a model's fields
as a plain dict, unchecked): a refused value is a 400 naming the field, and nothing is written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pydantic", reason="model states need the pydantic extra: pip install 'plait[pydantic]'")

from fastapi.testclient import TestClient  # noqa: E402

from plait import SqliteCheckpointer  # noqa: E402
from plait.server import StudioConfig, create_app  # noqa: E402

from ..graph._people import people  # noqa: E402
from ._studio_support import write_headers  # noqa: E402


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[TestClient]:
    saver = SqliteCheckpointer(str(tmp_path / "people.db"))
    people(saver).invoke({"name": "ada lovelace"}, thread_id="ada")
    app = create_app(saver, [people(None)], config=StudioConfig(allowed_hosts=("testserver",)))
    try:
        with TestClient(app) as client:
            yield client
    finally:
        saver.close()


def test_an_edit_is_validated_against_the_model(studio: TestClient) -> None:
    h = write_headers(studio)
    before = studio.get("/api/threads/ada/state").json()
    assert before["values"]["name"] == "Ada Lovelace"

    r = studio.post("/api/threads/ada/state", json={"values": {"age": "old"}}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "StateValidationError"
    assert "Person.age" in r.json()["message"]
    r = studio.post("/api/threads/ada/state", json={"values": {"age": -1}}, headers=h)
    assert r.status_code == 400 and "greater than or equal to 0" in r.json()["message"]
    assert studio.get("/api/threads/ada/state").json()["checkpoint_id"] == before["checkpoint_id"]

    r = studio.post("/api/threads/ada/state", json={"values": {"name": "grace hopper", "age": 85}}, headers=h)
    assert r.status_code == 201
    values = studio.get("/api/threads/ada/state").json()["values"]
    assert values["name"] == "Grace Hopper" and values["age"] == 85  # the validator ran once


def test_a_fork_with_a_refused_edit_makes_no_thread(studio: TestClient) -> None:
    h = write_headers(studio)
    r = studio.post("/api/threads/ada/fork", json={"thread_id": "copy", "edits": {"age": "old"}}, headers=h)
    assert r.status_code == 400 and r.json()["error"] == "StateValidationError"
    assert studio.get("/api/threads/copy").status_code == 404
    r = studio.post("/api/threads/ada/fork", json={"thread_id": "copy", "edits": {"age": 3}}, headers=h)
    assert r.status_code == 201
    assert studio.get("/api/threads/copy/state").json()["values"]["age"] == 3
