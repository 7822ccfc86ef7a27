"""The retention policy stored in the database, so that every process sweeps by the same one.

A policy given to a checkpointer (``retention=``) lives in one process; ``plait db retention``
stores one where every process that opens the store reads it. Each backend keeps it its own
way (a one-row table on SQLite and PostgreSQL, a JSON file in the file store's folder, this
process's memory for the memory backend) behind two hooks, :meth:`StoredPolicy._aread_policy`
and :meth:`StoredPolicy._awrite_policy`; the rest is here, once.

Which policy a sweep applies: a thread's own (its ``"retention"`` metadata) wins; else the
checkpointer's ``retention=`` (what the code running says); else the stored one.

A sweep also runs under :meth:`StoredPolicy._sweep_lock`: PostgreSQL holds an advisory lock
there, so that of several processes sweeping one database only one works at a time (the
others report :attr:`~plait.checkpoint.retention.SweepReport.held_elsewhere`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

from plait._sync import run_sync
from plait.checkpoint._sweep import Applied, GroupPlan, Sweepable, apply_one_by_one
from plait.checkpoint._sweep import sweep as run_sweep
from plait.checkpoint.model import ThreadInfo
from plait.checkpoint.retention import Retention, SweepReport
from plait.errors import RetentionError

__all__ = ["StoredPolicy"]


class StoredPolicy:
    """Retention's calls (the stored policy, the sweep), mixed into
    :class:`~plait.checkpoint.base.Checkpointer` (base.py keeps the storage protocol)."""

    retention: Retention | None = None
    _policy_in_process: dict[str, Any] | None = None

    # -- the hooks a backend overrides ------------------------------------------------------

    async def _aread_policy(self) -> Any:
        """The stored policy as JSON data (None: none stored). Default: this process's memory."""
        return self._policy_in_process

    async def _awrite_policy(self, data: dict[str, Any] | None) -> None:
        """Store ``data`` as the policy (None: remove it). Default: this process's memory."""
        self._policy_in_process = data

    @contextlib.asynccontextmanager
    async def _sweep_lock(self) -> AsyncIterator[bool]:
        """Hold the store's sweep lock while the block runs: yields False when another process
        holds it (the sweep then changes nothing). Default: always free (one process's store)."""
        yield True

    # -- the calls ---------------------------------------------------------------------------

    async def aget_stored_retention(self) -> Retention | None:
        """The policy stored in the database (``plait db retention``), or None.

        Raises:
            RetentionError: what is stored is not a policy (``plait db retention --off``
                removes it).
        """
        data = await self._aread_policy()
        if data is None:
            return None
        return Retention.from_json(
            data, where=f"the retention policy stored in {self!r} (plait db retention --off removes it)"
        )

    async def aset_stored_retention(self, policy: Retention) -> None:
        """Store ``policy`` in the database, for every process that opens it (replacing any).

        Raises:
            RetentionError: ``policy`` is not a :class:`~plait.checkpoint.retention.Retention`.
        """
        if not isinstance(policy, Retention):
            raise RetentionError("set_stored_retention(...)", f"{policy!r} is not a Retention")
        await self._awrite_policy(policy.to_json())

    async def aclear_stored_retention(self) -> None:
        """Remove the stored policy (nothing happens when there is none)."""
        await self._awrite_policy(None)

    async def aeffective_retention(self) -> Retention | None:
        """The policy a sweep applies to threads without one of their own: the checkpointer's
        ``retention=`` when given (the running code's word wins), else the stored one."""
        return self.retention if self.retention is not None else await self.aget_stored_retention()

    def get_stored_retention(self) -> Retention | None:
        """Sync :meth:`aget_stored_retention`."""
        return run_sync(self.aget_stored_retention())

    def set_stored_retention(self, policy: Retention) -> None:
        """Sync :meth:`aset_stored_retention`."""
        run_sync(self.aset_stored_retention(policy))

    def clear_stored_retention(self) -> None:
        """Sync :meth:`aclear_stored_retention`."""
        run_sync(self.aclear_stored_retention())

    def effective_retention(self) -> Retention | None:
        """Sync :meth:`aeffective_retention`."""
        return run_sync(self.aeffective_retention())

    # -- the sweep ---------------------------------------------------------------------------

    def set_retention(self, retention: Retention | None) -> None:
        """Set the policy :meth:`asweep` applies (None: none).

        Raises:
            RetentionError: ``retention`` is not a :class:`~plait.checkpoint.retention.Retention` or None.
        """
        if retention is not None and not isinstance(retention, Retention):
            raise RetentionError(f"{type(self).__name__}(retention=...)", f"{retention!r} is not a Retention or None")
        self.retention = retention

    async def asweep(self, *, dry_run: bool = False, at: float | None = None) -> SweepReport:
        """Apply the retention policy to every thread once: each thread's own (its
        ``"retention"`` metadata) wins, else :attr:`retention`, else the policy stored in the
        database (:meth:`aset_stored_retention`, ``plait db retention``).

        On PostgreSQL one process sweeps a database at a time (an advisory lock): a sweep that
        finds another under way changes nothing and reports ``held_elsewhere``.

        Busy threads are never touched (listed in the report); a thread is swept with the
        namespaces of its subgraphs. After a sweep every remaining thread reads back,
        resumes and answers its interrupts.

        Args:
            dry_run: change nothing; report what a sweep would remove now.
            at: judge idleness as if the store's clock read this (unix seconds; None: now):
                with ``dry_run``, what a sweep would remove then (tests sweep ahead with it).

        Example::

            store = SqliteCheckpointer("app.db", retention=Retention(after=30 * 86400))
            report = await store.asweep()
            print(report.deleted, report.checkpoints_removed)
        """
        if dry_run:  # changes nothing: needs no lock
            return await run_sweep(cast("Sweepable", self), await self.aeffective_retention(), dry_run=True, at=at)
        async with self._sweep_lock() as free:
            if not free:
                return SweepReport(held_elsewhere=True)
            return await run_sweep(cast("Sweepable", self), await self.aeffective_retention(), at=at)

    def sweep(self, *, dry_run: bool = False, at: float | None = None) -> SweepReport:
        """Sync :meth:`asweep`."""
        return run_sync(self.asweep(dry_run=dry_run, at=at))

    async def _alist_for_sweep(self, *, dry_run: bool) -> tuple[list[ThreadInfo], bool]:
        """The threads a sweep judges, and whether their ``checkpoints`` are counted. A
        backend whose count is costly lists without it when it can (a sweep that changes
        things counts only the threads it deletes whole, by :meth:`_acount_checkpoints`;
        the pruned ones are counted by the changes) and gets no ``share`` in
        :meth:`_aapply_sweep` then."""
        return await cast("Sweepable", self).alist_threads(), True

    async def _acount_checkpoints(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The checkpoints of each thread of ``keys`` (``(namespace, thread_id)``)."""
        found: dict[tuple[str, str], int] = {}
        for ns, tid in keys:
            info = await cast("Sweepable", self).aget_thread(tid, namespace=ns)
            found[(ns, tid)] = 0 if info is None else info.checkpoints
        return found

    async def _aheads_metadata(self, heads: Sequence[ThreadInfo]) -> list[Any]:
        """The metadata of each listed thread's head (None where the thread is gone), which
        holds its own policy. A backend that reads many heads at once overrides it (the SQL
        stores: one statement per batch, where a read per thread was most of a sweep's time
        on PostgreSQL)."""
        store = cast("Sweepable", self)
        found = [await store.aget(info.thread_id, namespace=info.namespace) for info in heads]
        return [None if cp is None else cp.metadata for cp in found]

    async def _aapply_sweep(self, plans: Sequence[GroupPlan], *, share: float = 0.0) -> Applied:
        """Apply a sweep's decisions (see :class:`~plait.checkpoint._sweep.Applied`).
        ``share``: the part of the store's listed checkpoints that the plans' groups hold.
        A backend that can check leases and change many threads in one transaction overrides
        it (the SQL stores do)."""
        return await apply_one_by_one(cast("Sweepable", self), plans)
