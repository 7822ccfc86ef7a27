"""Edits from the command line to a thread whose state is a Pydantic model: ``plait update``,
``plait fork --set`` and ``plait run --input`` validate as the library does, so a refused
value is a usage error that names the field, and nothing is written."""

from __future__ import annotations

import json
import pathlib

import pytest

pytest.importorskip("pydantic", reason="model states need the pydantic extra: pip install 'plait[pydantic]'")

from plait.cli import EXIT_OK, EXIT_USAGE, main  # noqa: E402

from ..graph import _people  # noqa: E402


@pytest.fixture
def people(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "people.py").write_text(pathlib.Path(_people.__file__).read_text())  # a module of its own
    return tmp_path


def plait(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _state(capsys: pytest.CaptureFixture[str], thread: str) -> dict[str, object]:
    code, out, _ = plait(capsys, "state", thread, "--db", "t.db", "--json")
    assert code == EXIT_OK
    values: dict[str, object] = json.loads(out)["values"]
    return values


def test_update_validates_against_the_model(people: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plait(capsys, "run", "people.py:graph", "-i", '{"name": "ada lovelace"}', "-t", "a", "--db", "t.db")
    assert code == EXIT_OK, err
    before = _state(capsys, "a")
    assert before["name"] == "Ada Lovelace" and before["greeting"] == "hello Ada Lovelace"

    code, _, err = plait(capsys, "update", "a", "--graph", "people.py:graph", "--set", "age=old", "--db", "t.db")
    assert code == EXIT_USAGE and "StateValidationError" in err and "age" in err
    assert _state(capsys, "a") == before  # nothing written

    code, _, err = plait(capsys, "update", "a", "--graph", "people.py:graph", "--set", "age:=-3", "--db", "t.db")
    assert code == EXIT_USAGE and "age" in err and "greater than or equal to 0" in err
    assert _state(capsys, "a") == before

    # a value the validator transforms is transformed once, on the write, never again on read
    code, _, err = plait(
        capsys, "update", "a", "--graph", "people.py:graph", "--set", "name=grace hopper", "--set", "age:=85",
        "--db", "t.db",
    )  # fmt: skip
    assert code == EXIT_OK, err
    after = _state(capsys, "a")
    assert after["name"] == "Grace Hopper" and after["age"] == 85
    assert _state(capsys, "a")["name"] == "Grace Hopper"


def test_fork_with_edits_validates_and_makes_no_thread_when_refused(
    people: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plait(capsys, "run", "people.py:graph", "-i", '{"name": "ada"}', "-t", "a", "--db", "t.db")
    code, _, err = plait(
        capsys, "fork", "a", "--to", "b", "--set", "age=old", "--graph", "people.py:graph", "--db", "t.db"
    )
    assert code == EXIT_USAGE and "age" in err
    code, _, _ = plait(capsys, "state", "b", "--db", "t.db", "--json")
    assert code != EXIT_OK  # no thread b
    code, _, err = plait(
        capsys, "fork", "a", "--to", "c", "--set", "age:=7", "--graph", "people.py:graph", "--db", "t.db"
    )
    assert code == EXIT_OK, err
    assert _state(capsys, "c")["age"] == 7


def test_run_with_a_refused_input_writes_no_thread(people: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plait(capsys, "run", "people.py:graph", "-i", '{"age": "old"}', "-t", "x", "--db", "t.db")
    assert code != EXIT_OK and "age" in err
    code, _, _ = plait(capsys, "state", "x", "--db", "t.db", "--json")
    assert code != EXIT_OK
