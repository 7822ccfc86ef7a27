"""When a SQL store's blocking call may run on the caller's thread: one rule for both stores.

A store's blocking calls (a SQLite transaction, a PostgreSQL round trip) run on threads of
its own, so that an event loop never waits for them. A hop to such a thread and back costs
two thread wake-ups, though (80-250 µs on a small virtual machine: as much as an fsync, or a
round trip to a server on the same machine), which a caller that only waits for the answer
gains nothing from. A lone run waiting for its commit (every ``invoke``, and ``ainvoke``
with sync durability) is such a caller. So a call may block its caller when nothing else on
the caller's event loop is ready to run, so nobody is kept waiting now, and nobody can be
kept waiting long later either, because either

- the call's wait is bounded: SQLite's inline calls touch a local file and give up at once,
  rather than wait, when another process holds its lock (see ``Worker.inline``); or
- nothing else will ever run on that loop: the sync facade runs each call on a loop of its
  own, whose caller blocks anyway (:func:`plait._sync.in_sync_call`).

A network call is not bounded (a stalled connection waits as long as the network does), so
PostgreSQL's calls block only the sync facade's loop; an async caller's loop may have work
arriving later (a server's next request). Each store then checks that what the call needs is
free: SQLite's worker idle, no other PostgreSQL job of the checkpointer running.
"""

from __future__ import annotations

import asyncio

from plait._sync import in_sync_call

__all__ = ["may_block"]


def may_block(loop: asyncio.AbstractEventLoop, *, bounded: bool) -> bool:
    """Whether a blocking call made on ``loop`` may run on its thread rather than on a
    store's thread (see the module's docstring for the rule and why).

    Args:
        loop: the running loop of the caller.
        bounded: whether the call's wait is bounded (SQLite inline), not a network's.
    """
    if not bounded and not in_sync_call():
        return False
    # asyncio has no public way to ask whether anything else is ready on a loop (all_tasks()
    # also lists the tasks that wait, such as a run's lease renewal, which is always there),
    # so asyncio's own loops are asked for their ready queue, here and nowhere else. On any
    # other loop (uvloop, say) the answer is no, and every call goes through the threads.
    ready = getattr(loop, "_ready", None)
    return ready is not None and not ready
