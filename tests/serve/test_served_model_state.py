"""A graph whose state is a Pydantic model, served: ``update_state`` from the SDK is validated
as the library validates it (a 422 naming the field; nothing written), and a run whose input
the model refuses ends in error and stores the refused value nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic", reason="model states need the pydantic extra: pip install 'plait[pydantic]'")

from langgraph_sdk import get_sync_client  # noqa: E402
from langgraph_sdk.errors import UnprocessableEntityError  # noqa: E402

from ..graph._people import people  # noqa: E402
from ._serve_support import served  # noqa: E402


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    with served(str(tmp_path / "people.db"), {"people": people()}) as base, get_sync_client(url=base) as c:
        yield c


def test_update_state_is_validated_against_the_model(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    done = client.runs.wait(thread, "people", input={"name": "ada lovelace"})
    assert done["name"] == "Ada Lovelace" and done["greeting"] == "hello Ada Lovelace"
    before = client.threads.get_state(thread)

    with pytest.raises(UnprocessableEntityError, match=r"Person\.age"):
        client.threads.update_state(thread, {"age": "old"})
    with pytest.raises(UnprocessableEntityError, match="greater than or equal to 0"):
        client.threads.update_state(thread, {"age": -2}, as_node="greet")
    assert client.threads.get_state(thread)["checkpoint"] == before["checkpoint"]

    client.threads.update_state(thread, {"name": "grace hopper", "age": 85})
    values = client.threads.get_state(thread)["values"]
    assert values["name"] == "Grace Hopper" and values["age"] == 85  # the validator ran once


def test_a_run_whose_input_the_model_refuses_writes_nothing(client: Any) -> None:
    thread = client.threads.create()["thread_id"]
    run = client.runs.create(thread, "people", input={"age": "old"})
    client.runs.join(thread, run["run_id"])
    assert client.runs.get(thread, run["run_id"])["status"] == "error"
    # the refused value is stored nowhere (the server's own stamp of the run's metadata may be)
    assert all(cp["values"].get("age") == 0 for cp in client.threads.get_history(thread))
    assert client.threads.get_state(thread)["values"] == {"name": "", "age": 0, "greeting": ""}
