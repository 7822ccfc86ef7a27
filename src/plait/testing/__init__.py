"""The whole contract of a :class:`~plait.checkpoint.base.Checkpointer`, as one reusable suite.

Anyone who writes a backend runs :func:`check_checkpointer` against it; plait's own tests run
it against every backend it ships. Each check is a named async function that builds real
checkpoints, commits them, reads them back and compares what came back with what went in,
byte for byte (values are compared by their canonical JSON, so ``1``, ``1.0`` and ``True``
are three different values, as they are in JSON).

Usage::

    from plait.testing import check_checkpointer

    async def factory() -> Checkpointer:  # a fresh, empty, set-up store on every call
        cp = MyCheckpointer(tempfile.mkdtemp())
        await cp.asetup()
        return cp

    async def reopen(cp: Checkpointer) -> Checkpointer:  # durable backends only
        await cp.aclose()
        return await reopen_same_storage(cp)

    check_checkpointer(factory, reopen=reopen)  # AssertionError naming every failed check

The checks are also exposed one by one (:data:`CHECKS`) so a test suite can report them
separately, e.g. ``@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)`` and
``check_checkpointer(factory, checks=[check])``.

A few checks sleep briefly (a lease must expire); none asserts how long anything took.
"""

from plait.testing._clock import ManualClock
from plait.testing._data_checks import SAMPLE
from plait.testing._harness import Check, Factory, Reopen
from plait.testing._robustness_checks import AWKWARD
from plait.testing._suite import CHECKS, acheck_checkpointer, check_checkpointer

__all__ = [
    "AWKWARD",
    "CHECKS",
    "SAMPLE",
    "Check",
    "Factory",
    "ManualClock",
    "Reopen",
    "acheck_checkpointer",
    "check_checkpointer",
]
