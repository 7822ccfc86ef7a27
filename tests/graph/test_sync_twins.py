"""Async core, sync facade: every ``a*`` coroutine method of CompiledGraph, and of the runs
client ``Runs``, has a sync twin named without the ``a`` taking the same parameters (names,
kinds, defaults, annotations), so the two APIs cannot drift apart."""

from __future__ import annotations

import inspect

import pytest

from plait import CompiledGraph
from plait.runs import Runs


def _async_methods(cls: type) -> list[str]:
    return sorted(  # the class's own methods and its bases' (the graph facade is built in floors)
        name
        for klass in cls.__mro__
        for name, fn in vars(klass).items()
        if name.startswith("a")
        and not name.startswith("_")
        and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
        and fn.__name__ == name  # an alias (an old name kept working) is checked as what it names
    )


@pytest.mark.parametrize(("cls", "at_least"), [(CompiledGraph, 12), (Runs, 13)])
def test_every_async_method_has_a_sync_twin_with_the_same_signature(cls: type, at_least: int) -> None:
    names = _async_methods(cls)
    assert len(names) >= at_least, names  # the walk found them
    for name in names:
        twin = getattr(cls, name[1:], None)
        assert twin is not None, f"{cls.__name__}.{name} has no sync twin {name[1:]}"
        a, s = inspect.signature(getattr(cls, name)), inspect.signature(twin)
        assert list(a.parameters.values()) == list(s.parameters.values()), f"{name} and {name[1:]} differ: {a} vs {s}"


def test_the_runs_clients_old_names_are_its_new_ones() -> None:
    assert Runs.await_run is Runs.ajoin and Runs.wait is Runs.join
    assert {"ajoin", "aopen", "asubmit", "aset_limit"} <= set(_async_methods(Runs))
