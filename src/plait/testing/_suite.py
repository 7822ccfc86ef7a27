"""Running the checks: the public entry points, and the one AssertionError that reports them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from plait.testing import (
    _data_checks,
    _feed_checks,
    _fence_checks,
    _history_checks,
    _integrity_checks,
    _lease_checks,
    _retention_checks,
    _robustness_checks,
    _search_checks,
    _status_checks,
    _thread_checks,
    _write_checks,
)
from plait.testing._harness import Check, Env, Factory, Reopen

CHECKS: tuple[Check, ...] = (
    *_data_checks.check.all,
    *_write_checks.check.all,
    *_history_checks.check.all,
    *_thread_checks.check.all,
    *_status_checks.check.all,
    *_search_checks.check.all,
    *_lease_checks.check.all,
    *_fence_checks.check.all,
    *_robustness_checks.check.all,
    *_integrity_checks.check.all,
    *_feed_checks.check.all,
    *_retention_checks.check.all,
)
"""Every check, in a stable order; each can be run on its own."""


def _selected(checks: Iterable[Check | str] | None) -> list[Check]:
    if checks is None:
        return list(CHECKS)
    by_name = {c.name: c for c in CHECKS}
    out = []
    for item in checks:
        if isinstance(item, Check):
            out.append(item)
        elif item in by_name:
            out.append(by_name[item])
        else:
            raise ValueError(f"no checkpointer check named {item!r}; known: {', '.join(by_name)}")
    return out


async def _run_one(check: Check, factory: Factory, reopen: Reopen | None) -> BaseException | None:
    env = Env(factory, reopen)
    try:
        await check.run(env)
    except Exception as exc:
        return exc
    finally:
        await env.close()
    return None


def _report(failures: list[tuple[Check, BaseException]]) -> None:
    if not failures:
        return
    lines = []
    for check, exc in failures:
        detail = str(exc) if isinstance(exc, AssertionError) else f"raised {type(exc).__name__}: {exc}"
        lines.append(f"check {check.name!r} failed ({check.doc}): {detail}")
    error = AssertionError(f"{len(failures)} checkpointer check(s) failed:\n  " + "\n  ".join(lines))
    raise error from failures[0][1]


async def acheck_checkpointer(
    factory: Factory, *, reopen: Reopen | None = None, checks: Iterable[Check | str] | None = None
) -> None:
    """Run the checks (default: all) in the running event loop.

    Args:
        factory: returns a fresh, empty, set-up checkpointer on every call; each check closes
            the ones it made (``aclose``).
        reopen: for durable backends, closes a checkpointer and returns a new one over the same
            storage; without it the checks that need it are skipped.
        checks: the checks to run, as :class:`Check` objects or names.

    Raises:
        AssertionError: naming every failed check and what differed; the first failure is
            chained as the cause.
    """
    failures = []
    for check in _selected(checks):
        if check.needs_reopen and reopen is None:
            continue
        exc = await _run_one(check, factory, reopen)
        if exc is not None:
            failures.append((check, exc))
    _report(failures)


def check_checkpointer(
    factory: Factory, *, reopen: Reopen | None = None, checks: Iterable[Check | str] | None = None
) -> None:
    """Run the checks (default: all), each in its own new event loop; see
    :func:`acheck_checkpointer`, which is what to call from code already in an event loop."""
    failures = []
    for check in _selected(checks):
        if check.needs_reopen and reopen is None:
            continue
        exc = asyncio.run(_run_one(check, factory, reopen))
        if exc is not None:
            failures.append((check, exc))
    _report(failures)
