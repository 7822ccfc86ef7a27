"""Fixtures of the command-line tests (the helpers they use are in ``_cli_support``)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from ._cli_support import FLOW, SCHEMAS, Cli


@pytest.fixture
def cli(tmp_path: pathlib.Path) -> Cli:
    """The ``plait`` command in a fresh folder that holds ``flow.py`` (see :data:`FLOW`)."""
    runner = Cli(tmp_path)
    runner.write("flow.py", FLOW)
    return runner


@pytest.fixture(scope="session")
def validate() -> Any:
    """``validate(name, value)``: hold ``value`` to ``docs/cli-schemas/NAME.json``."""
    import jsonschema
    from referencing import Registry, Resource

    schemas = {p.stem: json.loads(p.read_text()) for p in SCHEMAS.glob("*.json")}
    registry: Registry[Any] = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())

    def check(name: str, value: Any) -> None:
        schema = schemas[name]
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(
            schema, registry=registry, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        assert not errors, f"{name}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors)

    return check
