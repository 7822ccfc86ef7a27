"""What every check is built from: a fresh store per check, a model of a thread's checkpoints,
and comparisons that fail with an :class:`AssertionError` saying what differed.

Values are compared by their canonical JSON, so ``1``, ``1.0`` and ``True`` are three
different values, as they are in JSON.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plait._codec import canonical, freeze
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, PendingWrite, Task, new_checkpoint_id
from plait.errors import ThreadBusyError

Factory = Callable[[], Awaitable[Checkpointer]]
"""Returns a fresh, empty, set-up checkpointer on every call."""
Reopen = Callable[[Checkpointer], Awaitable[Checkpointer]]
"""Closes the given checkpointer and returns a new instance over the same storage."""


@dataclass(frozen=True, slots=True)
class Check:
    """One named part of the contract."""

    name: str
    doc: str
    """What the check pins, in one line."""
    run: Callable[[Env], Awaitable[None]]
    needs_reopen: bool = False
    """Only meaningful for durable backends; skipped when no ``reopen`` is given."""


class Env:
    """What a check gets: fresh checkpointers, reopening, and cleanup of both."""

    def __init__(self, factory: Factory, reopen: Reopen | None) -> None:
        self._factory = factory
        self._reopen = reopen
        self._open: list[Checkpointer] = []

    async def new(self) -> Checkpointer:
        cp = await self._factory()
        self._open.append(cp)
        return cp

    async def reopen(self, cp: Checkpointer) -> Checkpointer:
        if self._reopen is None:
            raise RuntimeError("this check needs a reopen callable")
        if cp in self._open:
            self._open.remove(cp)  # reopen closes it
        fresh = await self._reopen(cp)
        self._open.append(fresh)
        return fresh

    async def close(self) -> None:
        while self._open:
            await self._open.pop().aclose()


CheckFn = Callable[["Env"], Awaitable[None]]
"""What a check is: an async function of its :class:`Env`."""


class Checks:
    """The checks of one module, collected in the order they are defined.

    Each module of checks makes one (``check = Checks()``) and decorates its checks with it;
    :data:`plait.testing.CHECKS` concatenates the modules' lists in a fixed order, so the order
    of the checks does not depend on which module happens to be imported first.
    """

    def __init__(self) -> None:
        self.all: list[Check] = []

    def __call__(self, name: str, *, needs_reopen: bool = False) -> Callable[[CheckFn], CheckFn]:
        """Register a check under ``name``; the first line of its docstring describes it."""

        def register(fn: CheckFn) -> CheckFn:
            doc = (fn.__doc__ or name).strip().splitlines()[0]
            self.all.append(Check(name=name, doc=doc, run=fn, needs_reopen=needs_reopen))
            return fn

        return register


# --------------------------------------------------------------------------------------
# Building checkpoints and comparing what comes back


def _frozen(values: Mapping[str, Any]) -> FrozenDict:
    return FrozenDict({k: freeze(v, k) for k, v in values.items()})


class ThreadBuilder:
    """Builds a thread's checkpoints and remembers what each one must read back as."""

    def __init__(self, thread_id: str = "t", namespace: str = "") -> None:
        self.thread_id = thread_id
        self.namespace = namespace
        self.by_id: dict[str, Checkpoint] = {}
        self.head: Checkpoint | None = None
        self._version = 0

    def step(
        self,
        updates: Mapping[str, Any],
        *,
        parent: Checkpoint | None = None,
        root: bool = False,
        source: str = "loop",
        metadata: Mapping[str, Any] | None = None,
        next_tasks: Sequence[Task] = (),
        barriers: Mapping[str, Sequence[str]] | None = None,
        fold: bool = False,
        created_at: float | None = None,
    ) -> CheckpointWrite:
        """The next checkpoint: ``parent`` (default: the head; ``root=True``: none) plus
        ``updates``. Only the updated channels are marked ``changed`` (all, for a root)."""
        base = None if root else (parent or self.head)
        self._version += 1
        values = dict(base.values) if base else {}
        versions = dict(base.versions) if base else {}
        for key, value in updates.items():
            values[key] = freeze(value, key)
            versions[key] = self._version
        step = base.step + 1 if base else 0
        cp = Checkpoint(
            thread_id=self.thread_id,
            namespace=self.namespace,
            id=new_checkpoint_id(base.id if base else None),
            parent_id=base.id if base else None,
            step=step,
            values=FrozenDict(values),
            versions=versions,
            next_tasks=tuple(next_tasks),
            barriers={k: tuple(v) for k, v in (barriers or {}).items()},
            metadata=_frozen({"source": source, "step": step, **(metadata or {})}),
            created_at=1_700_000_000.0 + self._version + 0.125 if created_at is None else created_at,
        )
        self.by_id[cp.id] = cp
        self.head = cp
        changed = frozenset(updates) if base else frozenset(values)
        return CheckpointWrite(checkpoint=cp, changed=changed, folds_parent_writes=fold)

    def lineage(self, start: Checkpoint | None = None) -> list[Checkpoint]:
        """Newest first, from ``start`` (default: the head) through the parents."""
        out = []
        cursor = start or self.head
        while cursor is not None:
            out.append(cursor)
            cursor = self.by_id.get(cursor.parent_id) if cursor.parent_id else None
        return out


def fail(message: str) -> None:
    raise AssertionError(message)


def expect(cond: bool, message: str) -> None:
    if not cond:
        fail(message)


def _json(value: Any) -> bytes:
    try:
        return canonical(value)
    except TypeError:
        return repr(value).encode()


def _first_difference(got: Any, want: Any, path: str) -> str:
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        for key in sorted(set(got) | set(want)):
            if key not in got:
                return f"{path}[{key!r}] is missing"
            if key not in want:
                return f"{path}[{key!r}] is unexpected: {_short(got[key])}"
            if _json(got[key]) != _json(want[key]):
                return _first_difference(got[key], want[key], f"{path}[{key!r}]")
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return f"{path} has {len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if _json(g) != _json(w):
                return _first_difference(g, w, f"{path}[{i}]")
    return f"{path} is {_short(got)}, expected {_short(want)}"


def _short(value: Any) -> str:
    text = _json(value).decode(errors="replace")
    return text if len(text) <= 120 else text[:117] + "..."


def same(what: str, got: Any, want: Any) -> None:
    """JSON equality: ``1``, ``1.0`` and ``True`` differ, as they do in JSON."""
    if _json(got) != _json(want):
        fail(f"{what}: {_first_difference(got, want, 'value')}")


def _deeply_frozen(value: Any) -> bool:
    if isinstance(value, dict):
        return isinstance(value, FrozenDict) and all(_deeply_frozen(v) for v in value.values())
    if isinstance(value, list):
        return isinstance(value, FrozenList) and all(_deeply_frozen(v) for v in value)
    return not isinstance(value, tuple | set)


def _task_json(task: Task) -> list[Any]:
    return [task.id, task.node, task.send, task.arg]


def same_checkpoint(what: str, got: Checkpoint | None, want: Checkpoint) -> None:
    """Every field but pending writes is what was committed."""
    if got is None:
        fail(f"{what}: got None, expected checkpoint {want.id}")
        return
    expect(got.id == want.id, f"{what}: got checkpoint id {got.id!r}, expected {want.id!r}")
    expect(got.thread_id == want.thread_id, f"{what}: thread_id is {got.thread_id!r}, expected {want.thread_id!r}")
    expect(got.namespace == want.namespace, f"{what}: namespace is {got.namespace!r}, expected {want.namespace!r}")
    expect(got.parent_id == want.parent_id, f"{what}: parent_id is {got.parent_id!r}, expected {want.parent_id!r}")
    expect(got.step == want.step, f"{what}: step is {got.step!r}, expected {want.step!r}")
    same(f"{what}: values", dict(got.values), dict(want.values))
    expect(
        not isinstance(got.values, dict) or isinstance(got.values, FrozenDict),
        f"{what}: values came back as a mutable {type(got.values).__name__}; they must be read-only",
    )
    for key, value in got.values.items():
        expect(_deeply_frozen(value), f"{what}: channel {key!r} came back mutable; values must be frozen")
    same(f"{what}: versions", dict(got.versions), dict(want.versions))
    same(
        f"{what}: next_tasks",
        [_task_json(t) for t in got.next_tasks],
        [_task_json(t) for t in want.next_tasks],
    )
    same(f"{what}: barriers", {k: list(v) for k, v in got.barriers.items()}, dict(want.barriers))
    same(f"{what}: metadata", dict(got.metadata), dict(want.metadata))
    expect(
        abs(got.created_at - want.created_at) <= 1e-6,
        f"{what}: created_at is {got.created_at!r}, expected {want.created_at!r}",
    )


def same_writes(what: str, got: Sequence[PendingWrite], want: Iterable[PendingWrite]) -> None:
    """Pending writes as a set keyed by (task_id, kind, key); their order is not specified."""
    same(
        f"{what}: pending writes",
        sorted((w.to_json() for w in got), key=lambda j: j[:3]),
        sorted((w.to_json() for w in want), key=lambda j: j[:3]),
    )


async def same_history(what: str, cp: Checkpointer, th: ThreadBuilder, **kwargs: Any) -> list[Checkpoint]:
    got = await cp.ahistory(th.thread_id, namespace=th.namespace, **kwargs)
    want = th.lineage()
    same(f"{what}: history ids", [c.id for c in got], [c.id for c in want])
    for g, w in zip(got, want, strict=True):
        same_checkpoint(f"{what}: history entry {w.id}", g, w)
    return got


async def all_read_back(what: str, cp: Checkpointer, th: ThreadBuilder) -> None:
    """Every checkpoint of ``th`` by id, and its head, read back as committed."""
    for cid, want in th.by_id.items():
        same_checkpoint(f"{what}: get({cid})", await cp.aget(th.thread_id, cid, namespace=th.namespace), want)
    if th.head is not None:
        head = await cp.aget(th.thread_id, namespace=th.namespace)
        same_checkpoint(f"{what}: get() of the head", head, th.head)


def busy(exc: ThreadBusyError, thread_id: str, owner: str, ttl: float) -> None:
    expect(exc.thread_id == thread_id, f"ThreadBusyError.thread_id is {exc.thread_id!r}, expected {thread_id!r}")
    expect(exc.owner == owner, f"ThreadBusyError.owner is {exc.owner!r}, expected {owner!r}")
    expect(
        0 < exc.expires_in <= ttl + 1,
        f"ThreadBusyError.expires_in is {exc.expires_in!r}, expected a positive number up to the ttl {ttl}",
    )


def make_writes(*items: tuple[str, Any, str, Any]) -> tuple[PendingWrite, ...]:
    return tuple(PendingWrite(task_id=t, kind=k, key=key, value=freeze(v, "pending")) for t, k, key, v in items)
