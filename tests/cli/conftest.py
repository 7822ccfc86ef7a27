"""Fixtures of the command-line tests (the helpers they use are in ``_cli_support``)."""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..runs._runs_support import plait_worker, started, wait_for
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


@pytest.fixture
def worker(postgres_dsn: str, postgres_schema: str, tmp_path: pathlib.Path) -> Iterator[Callable[..., None]]:
    """``start(*args)``: a `plait worker` serving the runs tests' graphs on the scratch schema
    (set up by then), with extra ``args``; killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> None:
        log = tmp_path / f"worker-{len(procs)}.log"
        # unhurried: a busy machine's pause is never taken for a dead worker
        extra = ("--stalled-after", "60", "--lease-ttl", "60", *args)
        proc = plait_worker(postgres_dsn, postgres_schema, log=log, args=extra)
        procs.append(proc)
        wait_for(lambda: started(log) or proc.poll() is not None, 60, "the worker to start")
        assert proc.poll() is None, log.read_text()

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)
