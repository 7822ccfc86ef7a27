"""When a run's checkpoints reach the store: one strategy object per durability mode.

* ``sync``: each step's checkpoint is committed before the next step starts;
* ``async``: checkpoints are queued and committed while the next steps run (group commit),
  all of them durable when the run returns;
* ``exit``: only the checkpoint something needs is stored (the run's end, an interrupt, an
  error, a recorded effect); the skipped ones are folded into it.

The loop asks the same questions in every mode (store this, is it durable yet, what is the
next checkpoint's parent) and the strategy answers; no ``durability ==`` test is left in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

from plait.checkpoint.model import Checkpoint, CheckpointWrite, RestStatus, make_checkpoint_write
from plait.engine.commit import Committer
from plait.store import MemoryWrite
from plait.types import Durability

__all__ = ["Durable", "durability_for"]


class Durable:
    """What a run has stored, and how it stores the next checkpoint. The ``async`` mode's
    behaviour; the other modes change the methods that differ."""

    mode: Durability = "async"
    flushes_results = True
    """Whether a step of several tasks saves each finished task's result as it finishes (so
    a crash mid-step re-runs only the unfinished ones)."""

    def __init__(self, committer: Committer) -> None:
        self.committer = committer
        self.persisted_id: str | None = None
        """The newest checkpoint of this run that is (or is queued to be) stored."""
        self.current: Checkpoint | None = None
        """The newest checkpoint of this run, stored or not."""
        self.rest: RestStatus | None = None
        """How what is stored so far leaves the thread (None: nothing stored yet); the run
        gives its lease back with it."""

    def started_from(self, head: Checkpoint) -> None:
        """The run continues from ``head``, which is stored."""
        self.persisted_id = head.id

    def store(
        self,
        cp: Checkpoint,
        changed: AbstractSet[str],
        *,
        folds: bool,
        checked: bool = False,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        """Queue ``cp`` for commit (``checked``: see :attr:`CheckpointWrite.checked`), with
        the memory store writes of the step that made it."""
        self.current = cp
        self.rest = "ready" if cp.next_tasks else "idle"
        self.committer.submit(checkpoint=make_checkpoint_write(cp, frozenset(changed), folds, checked), memory=memory)
        self.persisted_id = cp.id

    async def store_step(
        self, cp: Checkpoint, changed: AbstractSet[str], *, folds: bool, memory: Sequence[MemoryWrite] = ()
    ) -> None:
        """Store a step's checkpoint (the loop's one call per step) and its memory store
        writes. A step checkpoint is :attr:`~plait.checkpoint.model.CheckpointWrite.checked`:
        the engine made every field of it, on a thread whose ids were checked before the
        run's first write."""
        self.store(cp, changed, folds=folds, checked=True, memory=memory)

    async def persist_current(self, cur: Checkpoint | None = None) -> None:
        """Make sure ``cur`` (by default the newest checkpoint) is stored or queued: a
        pending write or the run's end is about to need it."""

    async def sync_point(self) -> None:
        """Where the ``sync`` mode waits for the store."""

    def unsettled_memory(self) -> list[MemoryWrite]:
        """The memory writes of this run's steps that are not committed yet, oldest first:
        the run's later nodes read them as if they were (they see those steps' state too)."""
        return self.committer.unsettled_memory()

    def parent_for_next(self, cur: Checkpoint) -> str | None:
        """The parent the next checkpoint names: the stored checkpoint it follows."""
        return cur.id


class _Sync(Durable):
    mode = "sync"

    async def store_step(
        self, cp: Checkpoint, changed: AbstractSet[str], *, folds: bool, memory: Sequence[MemoryWrite] = ()
    ) -> None:
        # committed inline, without the queue: the step waits for it anyway
        self.current = cp
        self.persisted_id = cp.id
        self.rest = "ready" if cp.next_tasks else "idle"
        await self.committer.commit_now(
            make_checkpoint_write(cp, frozenset(changed), folds, True),
            memory,
        )

    async def sync_point(self) -> None:
        await self.committer.drain()


class _Exit(Durable):
    mode = "exit"
    flushes_results = False

    def __init__(self, committer: Committer) -> None:
        super().__init__(committer)
        self._unpersisted: set[str] = set()
        """Channels changed since :attr:`persisted_id`."""
        self._folds = False
        """Whether a skipped checkpoint folded its parent's pending writes."""
        self._memory: list[MemoryWrite] = []
        """The memory store writes of the skipped steps: committed with the next stored one."""

    def store(
        self,
        cp: Checkpoint,
        changed: AbstractSet[str],
        *,
        folds: bool,
        checked: bool = False,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        self.current = cp
        self.rest = "ready" if cp.next_tasks else "idle"
        self._unpersisted |= changed
        self._folds = folds or self._folds
        self._memory.extend(memory)

    async def persist_current(self, cur: Checkpoint | None = None) -> None:
        cp = cur or self.current
        if cp is None or self.persisted_id == cp.id:
            return
        self.committer.submit(
            checkpoint=CheckpointWrite(
                checkpoint=cp, changed=frozenset(self._unpersisted), folds_parent_writes=self._folds
            ),
            memory=self._memory,
        )
        self.persisted_id = cp.id
        self._unpersisted = set()
        self._folds = False
        self._memory = []

    def parent_for_next(self, cur: Checkpoint) -> str | None:
        return self.persisted_id

    def unsettled_memory(self) -> list[MemoryWrite]:
        return [*self.committer.unsettled_memory(), *self._memory]


_MODES: dict[str, type[Durable]] = {"sync": _Sync, "async": Durable, "exit": _Exit}


def durability_for(mode: Durability | Literal["sync", "async", "exit"], committer: Committer) -> Durable:
    """The strategy of ``mode``.

    Raises:
        ValueError: ``mode`` is not ``"sync"``, ``"async"`` or ``"exit"``.
    """
    try:
        return _MODES[mode](committer)
    except KeyError:
        raise ValueError(f"durability must be 'sync', 'async' or 'exit', got {mode!r}") from None
