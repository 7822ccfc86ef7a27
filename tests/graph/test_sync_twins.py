"""Async core, sync facade: every ``a*`` coroutine method of CompiledGraph has a sync twin
taking the same parameters, so the two APIs cannot drift apart."""

from __future__ import annotations

import inspect

from plait import CompiledGraph


def _async_methods() -> list[str]:
    return sorted(  # the class's own methods and its bases' (running, binding)
        name
        for klass in CompiledGraph.__mro__
        for name, fn in vars(klass).items()
        if name.startswith("a")
        and not name.startswith("_")
        and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
    )


def test_every_async_method_has_a_sync_twin_with_the_same_signature() -> None:
    names = _async_methods()
    assert len(names) >= 12, names  # the walk found them
    for name in names:
        twin = getattr(CompiledGraph, name[1:], None)
        assert twin is not None, f"CompiledGraph.{name} has no sync twin {name[1:]}"
        a, s = inspect.signature(getattr(CompiledGraph, name)), inspect.signature(twin)
        assert list(a.parameters.values()) == list(s.parameters.values()), f"{name} and {name[1:]} differ: {a} vs {s}"
