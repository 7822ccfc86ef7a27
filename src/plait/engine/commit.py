"""The committer: the one path from a run to its checkpointer.

Commits go out one at a time, in order; whatever is queued while one is in flight goes out
together in the next (group commit). In ``sync`` durability the loop waits for the
checkpoint's commit before starting the next super-step; in ``async`` it does not, so
consecutive steps that finish during a commit share the next one; pending writes of a
running step are flushed the same way, never one commit per task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import CheckpointWrite, Fence, RestStatus, WritesBatch
from plait.store import MemoryBackend, MemoryWrite

__all__ = ["Committer"]


class Committer:
    """Commits in order, one in flight at a time, grouping what queues up meanwhile.

    A failed commit is final for the run: the error is kept and re-raised by every later
    call, and nothing queued after it is ever committed, so a failure can never leave a
    later checkpoint stored on top of a missing one.

    With a ``fence`` (a run on a thread: its lease's generation), every commit carries it,
    so the backend refuses the commit, atomically, once the lease is no longer the thread's
    current one: the guard only knows what the lease renewer found at its last renewal,
    which may be up to a third of the lease's life ago, or never for a worker that stalled.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        on_commit: Callable[[Sequence[CheckpointWrite]], None] | None = None,
        guard: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.on_commit = on_commit
        self.guard = guard
        """Called before every commit; raises to refuse it (the run lost its lease)."""
        self.fence = fence
        """Passed to every commit."""
        self.memory_elsewhere: MemoryBackend | None = None
        """Where memory writes go when the run's store is not in the checkpointer's database:
        applied there right before the commit of their step (never lost: a crash between
        the two re-runs the step, which writes the same items again). None: they go in the
        checkpointer's own commit, in its transaction."""
        self._checkpoints: list[CheckpointWrite] = []
        self._memory: list[MemoryWrite] = []
        self._flying: list[MemoryWrite] = []
        """The memory writes of the commit in flight."""
        self._writes: list[WritesBatch] = []
        self._inflight: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self.commits = 0
        self._last_fence: Fence | None = None
        """The fence of the run's last commit, which also gives its lease back; see
        :meth:`release_on_next`."""
        self.released = False
        """Whether a commit gave the fence owner's lease back (the run needs no release)."""

    def _queue(
        self, checkpoint: CheckpointWrite | None, writes: WritesBatch | None, memory: Sequence[MemoryWrite] = ()
    ) -> None:
        if self._error is not None:
            raise self._error
        self._memory.extend(memory)
        if writes is not None:
            self._writes.append(writes)
        if checkpoint is not None:
            if checkpoint.folds_parent_writes:
                parent = checkpoint.checkpoint.parent_id
                # queued writes of the folded step are now part of the checkpoint
                self._writes = [w for w in self._writes if w.checkpoint_id != parent]
            self._checkpoints.append(checkpoint)

    def submit(
        self,
        *,
        checkpoint: CheckpointWrite | None = None,
        writes: WritesBatch | None = None,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        """Queue a checkpoint and/or writes (and the memory store writes of the checkpoint's
        step, committed with it); a commit starts if none is in flight."""
        self._queue(checkpoint, writes, memory)
        if self._inflight is None and (self._checkpoints or self._writes or self._memory):
            self._inflight = asyncio.get_running_loop().create_task(self._run())

    async def _commit_queued(self) -> None:
        cps, ws, ms = self._checkpoints, self._writes, self._memory
        self._checkpoints, self._writes, self._memory = [], [], []
        self._flying = ms
        fence = self.fence
        if self._last_fence is not None:
            fence, self._last_fence = self._last_fence, None
        try:
            if self.guard is not None:
                self.guard()
            if ms and self.memory_elsewhere is not None:
                await self.memory_elsewhere.acommit(memory=ms)
                ms = []
            if ms:
                await self.checkpointer.acommit(checkpoints=cps, writes=ws, fence=fence, memory=ms)
            else:  # (the call every checkpointer takes, one written before memory writes too)
                await self.checkpointer.acommit(checkpoints=cps, writes=ws, fence=fence)
        except BaseException as exc:
            self._error = exc
            self._checkpoints, self._writes, self._memory = [], [], []
            raise
        finally:
            self._flying = []
        self.commits += 1
        if fence is not None and fence.release:
            self.released = True
        if self.on_commit is not None and cps:
            self.on_commit(cps)

    async def _run(self) -> None:
        try:
            while self._checkpoints or self._writes or self._memory:
                await self._commit_queued()
        except BaseException:
            pass  # kept in self._error; raised by the next drain()
        finally:
            self._inflight = None

    def unsettled_memory(self) -> list[MemoryWrite]:
        """The memory writes submitted and not yet committed, oldest first."""
        return [*self._flying, *self._memory]

    def release_on_next(self, status: RestStatus | None) -> None:
        """Make the next commit give the fence's lease back in its transaction, leaving the
        thread ``status`` (see :attr:`Fence.release`); :attr:`released` says whether it did.

        The caller queues the run's last work right after this, with no ``await`` between
        (so no commit can start with part of it): that commit is then the run's last.
        """
        # A subgraph's run (``lease_namespace``) borrows its parent's lease: never gives it back.
        if self.fence is not None and self.fence.token is not None and self.fence.lease_namespace is None:
            self._last_fence = replace(self.fence, release=True, status=status)

    async def commit_now(self, checkpoint: CheckpointWrite, memory: Sequence[MemoryWrite] = ()) -> None:
        """Commit ``checkpoint`` (with anything queued) and wait for it: sync durability.

        When nothing is in flight this calls the checkpointer directly, without a task
        hop, because a super-step that waits for its commit gains nothing from one.
        """
        if self._inflight is not None:
            self.submit(checkpoint=checkpoint, memory=memory)
            await self.drain()
            return
        self._queue(checkpoint, None, memory)
        await self._commit_queued()

    async def drain(self) -> None:
        """Wait until everything submitted is committed; raise the failure if one happened."""
        while self._inflight is not None:
            await asyncio.shield(self._inflight)
        if self._error is None and (self._checkpoints or self._writes or self._memory):
            self.submit()
            await self.drain()
        if self._error is not None:
            raise self._error
