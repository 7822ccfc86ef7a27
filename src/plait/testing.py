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
        await cp.setup()
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

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from plait._codec import canonical, freeze
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    PendingWrite,
    Task,
    ThreadInfo,
    WritesBatch,
    new_checkpoint_id,
)
from plait.errors import PlaitError, ThreadBusyError

__all__ = ["AWKWARD", "CHECKS", "SAMPLE", "Check", "Factory", "Reopen", "acheck_checkpointer", "check_checkpointer"]

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
    run: Callable[[_Env], Awaitable[None]]
    needs_reopen: bool = False
    """Only meaningful for durable backends; skipped when no ``reopen`` is given."""


class _Env:
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


_REGISTRY: list[Check] = []


_CheckFn = Callable[["_Env"], Awaitable[None]]


def _check(name: str, *, needs_reopen: bool = False) -> Callable[[_CheckFn], _CheckFn]:
    """Register a check under ``name``; the first line of its docstring describes it."""

    def register(fn: _CheckFn) -> _CheckFn:
        doc = (fn.__doc__ or name).strip().splitlines()[0]
        _REGISTRY.append(Check(name=name, doc=doc, run=fn, needs_reopen=needs_reopen))
        return fn

    return register


# --------------------------------------------------------------------------------------
# Building checkpoints and comparing what comes back


def _frozen(values: Mapping[str, Any]) -> FrozenDict:
    return FrozenDict({k: freeze(v, k) for k, v in values.items()})


class _Thread:
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


def _fail(message: str) -> None:
    raise AssertionError(message)


def _expect(cond: bool, message: str) -> None:
    if not cond:
        _fail(message)


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


def _same(what: str, got: Any, want: Any) -> None:
    """JSON equality: ``1``, ``1.0`` and ``True`` differ, as they do in JSON."""
    if _json(got) != _json(want):
        _fail(f"{what}: {_first_difference(got, want, 'value')}")


def _deeply_frozen(value: Any) -> bool:
    if isinstance(value, dict):
        return isinstance(value, FrozenDict) and all(_deeply_frozen(v) for v in value.values())
    if isinstance(value, list):
        return isinstance(value, FrozenList) and all(_deeply_frozen(v) for v in value)
    return not isinstance(value, tuple | set)


def _task_json(task: Task) -> list[Any]:
    return [task.id, task.node, task.send, task.arg]


def _same_checkpoint(what: str, got: Checkpoint | None, want: Checkpoint) -> None:
    """Every field but pending writes is what was committed."""
    if got is None:
        _fail(f"{what}: got None, expected checkpoint {want.id}")
        return
    _expect(got.id == want.id, f"{what}: got checkpoint id {got.id!r}, expected {want.id!r}")
    _expect(got.thread_id == want.thread_id, f"{what}: thread_id is {got.thread_id!r}, expected {want.thread_id!r}")
    _expect(got.namespace == want.namespace, f"{what}: namespace is {got.namespace!r}, expected {want.namespace!r}")
    _expect(got.parent_id == want.parent_id, f"{what}: parent_id is {got.parent_id!r}, expected {want.parent_id!r}")
    _expect(got.step == want.step, f"{what}: step is {got.step!r}, expected {want.step!r}")
    _same(f"{what}: values", dict(got.values), dict(want.values))
    _expect(
        not isinstance(got.values, dict) or isinstance(got.values, FrozenDict),
        f"{what}: values came back as a mutable {type(got.values).__name__}; they must be read-only",
    )
    for key, value in got.values.items():
        _expect(_deeply_frozen(value), f"{what}: channel {key!r} came back mutable; values must be frozen")
    _same(f"{what}: versions", dict(got.versions), dict(want.versions))
    _same(
        f"{what}: next_tasks",
        [_task_json(t) for t in got.next_tasks],
        [_task_json(t) for t in want.next_tasks],
    )
    _same(f"{what}: barriers", {k: list(v) for k, v in got.barriers.items()}, dict(want.barriers))
    _same(f"{what}: metadata", dict(got.metadata), dict(want.metadata))
    _expect(
        abs(got.created_at - want.created_at) <= 1e-6,
        f"{what}: created_at is {got.created_at!r}, expected {want.created_at!r}",
    )


def _writes_key(w: PendingWrite) -> tuple[str, str, str]:
    return (w.task_id, w.kind, w.key)


def _same_writes(what: str, got: Sequence[PendingWrite], want: Iterable[PendingWrite]) -> None:
    """Pending writes as a set keyed by (task_id, kind, key); their order is not specified."""
    _same(
        f"{what}: pending writes",
        sorted((w.to_json() for w in got), key=lambda j: j[:3]),
        sorted((w.to_json() for w in want), key=lambda j: j[:3]),
    )


async def _same_history(what: str, cp: Checkpointer, th: _Thread, **kwargs: Any) -> list[Checkpoint]:
    got = await cp.history(th.thread_id, namespace=th.namespace, **kwargs)
    want = th.lineage()
    _same(f"{what}: history ids", [c.id for c in got], [c.id for c in want])
    for g, w in zip(got, want, strict=True):
        _same_checkpoint(f"{what}: history entry {w.id}", g, w)
    return got


async def _all_read_back(what: str, cp: Checkpointer, th: _Thread) -> None:
    """Every checkpoint of ``th`` by id, and its head, read back as committed."""
    for cid, want in th.by_id.items():
        _same_checkpoint(f"{what}: get({cid})", await cp.get(th.thread_id, cid, namespace=th.namespace), want)
    if th.head is not None:
        head = await cp.get(th.thread_id, namespace=th.namespace)
        _same_checkpoint(f"{what}: get() of the head", head, th.head)


def _busy(exc: ThreadBusyError, thread_id: str, owner: str, ttl: float) -> None:
    _expect(exc.thread_id == thread_id, f"ThreadBusyError.thread_id is {exc.thread_id!r}, expected {thread_id!r}")
    _expect(exc.owner == owner, f"ThreadBusyError.owner is {exc.owner!r}, expected {owner!r}")
    _expect(
        0 < exc.expires_in <= ttl + 1,
        f"ThreadBusyError.expires_in is {exc.expires_in!r}, expected a positive number up to the ttl {ttl}",
    )


SAMPLE: Mapping[str, Any] = {
    "text": "hello \u2018world\u2019 \u2713 \U0001f9f5",
    "count": 3,
    "ratio": 0.1,
    "one_float": 1.0,
    "ints": [2**63 - 1, -(2**63), 2**64 - 1, 0, -1],
    "floats": [1e300, 5e-324, -2.5, 123456789.125],
    "flag": True,
    "nothing": None,
    "nested": {"a": [1, {"b": [True, False, None, "x"]}], "": "empty key", "\u043a\u043b\u044e\u0447": "\u00e9"},
    "empty_list": [],
    "empty_dict": {},
    "messages": [{"id": "m1", "role": "user", "content": "hi"}],
}
"""Channel values covering every JSON type and the edges of numbers and text."""


# --------------------------------------------------------------------------------------
# The checks


@_check("root_round_trip")
async def _root_round_trip(env: _Env) -> None:
    """A root checkpoint reads back exactly (head and by id): every field, values frozen."""
    cp = await env.new()
    th = _Thread("t")
    tasks = [
        Task(id="task-a", node="a"),
        Task(id="task-b0", node="b", send=True, arg={"n": 0, "items": [1, 2.5, "three", None]}),
        Task(id="task-b1", node="b", send=True, arg=None),
        Task(id="task-b2", node="b", send=True, arg=[]),
    ]
    cw = th.step(
        SAMPLE,
        root=True,
        source="input",
        metadata={"writes": {"__input__": ["text", "count"]}, "label": "first", "graph": "f" * 32, "user": {"k": 1}},
        next_tasks=tasks,
        barriers={"join:c": ["a", "b"], "join:d": []},
        created_at=1712345678.123456,
    )
    await cp.commit(checkpoints=[cw])
    want = cw.checkpoint
    head = await cp.get("t")
    _same_checkpoint("get('t')", head, want)
    _same_checkpoint("get('t', id)", await cp.get("t", want.id), want)
    assert head is not None
    _expect(head.pending_writes == (), f"a checkpoint with no pending writes came back with {head.pending_writes!r}")
    _expect(head.version == want.version, f"version is {head.version}, expected {want.version}")
    for task in head.next_tasks:
        _expect(isinstance(task, Task), f"next_tasks holds a {type(task).__name__}, expected Task")
    for key, value in head.barriers.items():
        _expect(isinstance(value, tuple), f"barrier {key!r} came back as {type(value).__name__}, expected tuple")


@_check("root_values_stored_without_changed")
async def _root_without_changed(env: _Env) -> None:
    """``changed`` is relative to the parent: a root's values are stored even if it is empty."""
    cp = await env.new()
    th = _Thread("t")
    cw = th.step({"a": [1, 2], "b": {"x": "y"}}, root=True)
    await cp.commit(checkpoints=[replace(cw, changed=frozenset())])
    _same_checkpoint("a root committed with changed=frozenset()", await cp.get("t"), cw.checkpoint)


@_check("get_missing_returns_none")
async def _get_missing(env: _Env) -> None:
    """get() of an unknown thread, id, or namespace is None; reads of nothing are empty."""
    cp = await env.new()
    _expect(await cp.get("nope") is None, "get() of a thread never written is not None")
    _expect(await cp.history("nope") == [], "history() of a thread never written is not []")
    _expect(await cp.list_threads() == [], "list_threads() of an empty store is not []")
    th = _Thread("t")
    cw = th.step({"a": 1}, root=True)
    await cp.commit(checkpoints=[cw])
    _expect(await cp.get("t", new_checkpoint_id()) is None, "get() of an unknown checkpoint id is not None")
    _expect(await cp.get("other", cw.checkpoint.id) is None, "get() found a checkpoint under another thread's id")
    _expect(await cp.get("t", namespace="ns") is None, "get() found a thread in a namespace it was not written to")
    await cp.commit()  # an empty commit is a no-op
    _same_checkpoint("after an empty commit", await cp.get("t"), cw.checkpoint)


@_check("unchanged_channels_inherit")
async def _unchanged_inherit(env: _Env) -> None:
    """Only ``changed`` channels are new in a child; the others read back from its ancestors."""
    cp = await env.new()
    th = _Thread("t")
    plan: list[Mapping[str, Any]] = [
        {"a": 1, "b": [1], "c": {"k": "v"}, "d": "kept from the root"},
        {"a": 2},
        {"b": [1, 2]},
        {},
        {"c": {"k": "w", "n": None}, "e": "new channel"},
        {"a": 3, "b": [1, 2, 3]},
        {"e": None},
        {"a": 4},
    ]
    for i, updates in enumerate(plan):
        await cp.commit(checkpoints=[th.step(updates, root=i == 0)])
        _same_checkpoint(f"head after step {i}", await cp.get("t"), th.head)  # type: ignore[arg-type]
    await _all_read_back("chain with partial changes", cp, th)
    await _same_history("chain with partial changes", cp, th)


@_check("long_append_only_list")
async def _long_append(env: _Env) -> None:
    """An append-only list over many steps reads back right at every checkpoint, by id too."""
    cp = await env.new()
    th = _Thread("chat")
    await cp.commit(checkpoints=[th.step({"messages": [], "phase": "start", "turns": 0}, root=True)])
    for i in range(120):
        new = [
            {"id": f"m{i}-{j}", "role": "ai" if j else "user", "content": f"step {i} part {j} " * 3}
            for j in range(i % 3 + 1)
        ]
        head = th.head
        assert head is not None
        # Like a reducer: the new list reuses the stored items, so a backend can store a delta.
        updates: dict[str, Any] = {"messages": [*head.values["messages"], *new], "turns": i + 1}
        if i % 17 == 0:
            updates["phase"] = f"phase-{i}"
        await cp.commit(checkpoints=[th.step(updates)])
    await _all_read_back("append-only list", cp, th)
    await _same_history("append-only list", cp, th)
    middle = th.lineage()[60]
    _same_checkpoint("a middle checkpoint by id", await cp.get("chat", middle.id), middle)


@_check("value_shape_changes")
async def _shape_changes(env: _Env) -> None:
    """A channel whose value shrinks, is replaced, or changes type reads back exactly."""
    cp = await env.new()
    th = _Thread("t")
    sequence: list[Any] = [
        [1, 2, 3],
        [1, 2, 3, 4],
        [1, 2],
        [9, 2, 3, 4, 5],
        [],
        [[1], {"a": 1}],
        [[1, 2], {"a": 1, "b": 2}],
        {"now": "a dict"},
        {"now": "a dict", "more": [1]},
        "a string",
        None,
        0,
        [None],
        [None, None],
        {"": [1, {"": []}]},
    ]
    await cp.commit(checkpoints=[th.step({"x": sequence[0], "steady": [1]}, root=True)])
    for value in sequence[1:]:
        await cp.commit(checkpoints=[th.step({"x": value})])
    await _all_read_back("changing shapes", cp, th)


@_check("dict_channel_updates_and_deletions")
async def _dict_channel(env: _Env) -> None:
    """A dict channel with keys added, changed and deleted reads back right at every step."""
    cp = await env.new()
    th = _Thread("t")
    current: dict[str, Any] = {"a": 1, "b": {"deep": [1, 2]}, "weird key/..": "v"}
    await cp.commit(checkpoints=[th.step({"m": current}, root=True)])
    edits: list[tuple[dict[str, Any], list[str]]] = [
        ({"c": 3}, []),
        ({"a": 10}, ["b"]),
        ({"b": {"deep": [1, 2, 3]}}, ["weird key/.."]),
        ({}, ["a", "c"]),
        ({"": None, "\u2603": "snow"}, []),
        ({}, ["", "\u2603", "b"]),
        ({"back": {"x": {"y": {"z": 1}}}}, []),
        ({"back": {"x": {"y": {"z": 2, "w": 3}}}}, []),
    ]
    for add, remove in edits:
        current = {k: v for k, v in current.items() if k not in remove} | add
        await cp.commit(checkpoints=[th.step({"m": current})])
    await _all_read_back("dict channel", cp, th)
    await _same_history("dict channel", cp, th)


def _writes(*items: tuple[str, Any, str, Any]) -> tuple[PendingWrite, ...]:
    return tuple(PendingWrite(task_id=t, kind=k, key=key, value=freeze(v, "pending")) for t, k, key, v in items)


@_check("pending_writes_upsert_and_scope")
async def _pending_writes(env: _Env) -> None:
    """Pending writes come back on their checkpoint only; same (task, kind, key) replaces."""
    cp = await env.new()
    th = _Thread("t")
    root = th.step({"a": 1}, root=True)
    child = th.step({"a": 2})
    await cp.commit(checkpoints=[root, child])
    rid, cid = root.checkpoint.id, child.checkpoint.id
    first = _writes(
        ("t1", "result", "", {"writes": [["a", 5], ["b", [1, 2]]], "routes": ["next"]}),
        ("t2", "effect", "charge", {"receipt": "r-1", "amount": 12.5}),
        ("t2", "effect", "email", "sent"),
        ("t3", "interrupt", "", {"id": "i-1", "value": {"question": "ok?"}}),
        ("", "breakpoint", "", None),
    )
    await cp.commit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=first)])
    got = await cp.get("t", rid)
    assert got is not None
    _same_writes("get(root)", got.pending_writes, first)
    head = await cp.get("t")
    _expect(head is not None and head.pending_writes == (), "the head shows pending writes saved on its parent")
    again = _writes(
        ("t1", "result", "", {"writes": [["a", 6]], "routes": []}),
        ("t3", "resume", "", ["yes"]),
    )
    await cp.commit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=again)])
    expected = {_writes_key(w): w for w in first + again}
    got = await cp.get("t", rid)
    assert got is not None
    _same_writes("get(root) after an upsert", got.pending_writes, expected.values())
    on_child = _writes(("c1", "result", "", {"writes": [], "routes": []}))
    await cp.commit(writes=[WritesBatch(thread_id="t", checkpoint_id=cid, writes=on_child)])
    got = await cp.get("t")
    assert got is not None
    _same_writes("get() of the head", got.pending_writes, on_child)
    got = await cp.get("t", rid)
    assert got is not None
    _same_writes("get(root) after writes on its child", got.pending_writes, expected.values())
    for entry in await cp.history("t"):
        _expect(entry.pending_writes == (), f"history() entry {entry.id} includes pending writes")


@_check("fold_parent_writes")
async def _fold(env: _Env) -> None:
    """A child with folds_parent_writes deletes its parent's pending writes; without, keeps them."""
    cp = await env.new()
    th = _Thread("t")
    root = th.step({"a": 1}, root=True)
    await cp.commit(checkpoints=[root])
    rid = root.checkpoint.id
    saved = _writes(("t1", "result", "", {"writes": [["a", 2]], "routes": []}), ("t1", "effect", "x", 1))
    await cp.commit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=saved)])
    kept = th.step({"a": 2}, parent=root.checkpoint, source="update")
    await cp.commit(checkpoints=[kept])
    got = await cp.get("t", rid)
    assert got is not None
    _same_writes("parent after a child without folds_parent_writes", got.pending_writes, saved)
    folded = th.step({"a": 3}, parent=root.checkpoint, fold=True)
    await cp.commit(checkpoints=[folded])
    got = await cp.get("t", rid)
    assert got is not None
    _same_writes("parent after a child with folds_parent_writes", got.pending_writes, ())
    _same_checkpoint("the parent itself after the fold", got, root.checkpoint)
    _same_checkpoint("the head after the fold", await cp.get("t"), folded.checkpoint)


@_check("one_commit_many_checkpoints")
async def _one_commit(env: _Env) -> None:
    """One commit can hold a parent and its child, several threads, and pending writes."""
    cp = await env.new()
    a, b = _Thread("a"), _Thread("b", namespace="ns")
    a_root = a.step({"x": [1], "y": "kept"}, root=True)
    a_child = a.step({"x": [1, 2]})
    a_grandchild = a.step({"z": True})
    b_root = b.step({"x": "b"}, root=True)
    w_a = _writes(("t", "result", "", {"writes": [["x", 3]], "routes": []}))
    w_b = _writes(("u", "effect", "k", 7))
    await cp.commit(
        checkpoints=[a_root, a_child, a_grandchild, b_root],
        writes=[
            WritesBatch(thread_id="a", checkpoint_id=a_grandchild.checkpoint.id, writes=w_a),
            WritesBatch(thread_id="b", namespace="ns", checkpoint_id=b_root.checkpoint.id, writes=w_b),
        ],
    )
    await _all_read_back("thread a", cp, a)
    await _all_read_back("thread b", cp, b)
    await _same_history("thread a", cp, a)
    got_a, got_b = await cp.get("a"), await cp.get("b", namespace="ns")
    assert got_a is not None and got_b is not None
    _same_writes("thread a head", got_a.pending_writes, w_a)
    _same_writes("thread b head", got_b.pending_writes, w_b)


class _NotJson:
    """A value no backend can encode; slipped past freeze() to make a commit fail."""


def _poisoned(cw: CheckpointWrite, channel: str) -> CheckpointWrite:
    values = FrozenDict({**cw.checkpoint.values, channel: FrozenList([1, _NotJson()])})
    return replace(cw, checkpoint=replace(cw.checkpoint, values=values), changed=cw.changed | {channel})


@_check("failed_commit_leaves_nothing")
async def _failed_commit(env: _Env) -> None:
    """A commit that fails (a value that cannot be encoded) leaves nothing of itself behind.

    A backend that keeps values as Python objects (memory) may accept the value; then there is
    no failure to observe and only the store's continued health is checked."""
    cp = await env.new()
    old = _Thread("old")
    base = old.step({"a": [1, 2, 3], "b": "x"}, root=True)
    await cp.commit(checkpoints=[base])
    saved = _writes(("t1", "result", "", {"writes": [["a", 4]], "routes": []}))
    await cp.commit(writes=[WritesBatch(thread_id="old", checkpoint_id=base.checkpoint.id, writes=saved)])
    before = await cp.list_threads()

    extra = _writes(("t2", "effect", "e", "extra"))
    fresh = _Thread("fresh")
    for variant in ("bad checkpoint last", "bad pending write last"):
        folding = old.step({"a": [1, 2, 3, 4]}, parent=base.checkpoint, fold=True)
        new_root = fresh.step({"v": 1}, root=True)
        bad_root = _Thread("bad").step({"v": 1}, root=True)
        checkpoints = [folding, new_root]
        batches = [WritesBatch(thread_id="old", checkpoint_id=base.checkpoint.id, writes=extra)]
        if variant == "bad checkpoint last":
            checkpoints.append(_poisoned(bad_root, "boom"))
        else:
            checkpoints.append(bad_root)
            poison = PendingWrite(task_id="t9", kind="effect", key="boom", value=FrozenList([_NotJson()]))
            batches.append(WritesBatch(thread_id="old", checkpoint_id=base.checkpoint.id, writes=(poison,)))
        try:
            await cp.commit(checkpoints=checkpoints, writes=batches)
        except Exception:
            pass
        else:
            for th in (old, fresh):  # accepted: drop what the store now holds, start over
                await cp.delete_thread(th.thread_id)
            await cp.delete_thread("bad")
            return
        what = f"after a failed commit ({variant})"
        for tid in ("fresh", "bad"):
            _expect(await cp.get(tid) is None, f"{what}: thread {tid!r} of the failed commit exists")
            _expect(await cp.history(tid) == [], f"{what}: thread {tid!r} of the failed commit has history")
        _expect(
            await cp.get("old", folding.checkpoint.id) is None, f"{what}: a checkpoint of the failed commit was stored"
        )
        got = await cp.get("old")
        _same_checkpoint(f"{what}: the old head", got, base.checkpoint)
        assert got is not None
        _same_writes(f"{what}: the old head", got.pending_writes, saved)
        _same(f"{what}: list_threads()", [t.thread_id for t in await cp.list_threads()], [t.thread_id for t in before])
        del old.by_id[folding.checkpoint.id], fresh.by_id[new_root.checkpoint.id]
        old.head = base.checkpoint
    ok = old.step({"a": [1, 2, 3, 5]}, fold=True)
    await cp.commit(checkpoints=[ok])
    _same_checkpoint("a commit after failed ones", await cp.get("old"), ok.checkpoint)
    await _all_read_back("after failed commits", cp, old)


async def _ten_steps(cp: Checkpointer, th: _Thread) -> None:
    await cp.commit(checkpoints=[th.step({"n": 0, "log": []}, root=True, source="input")])
    for i in range(1, 10):
        source = "update" if i in (3, 7) else "loop"
        meta = {"label": "mark"} if i % 4 == 0 else {}
        await cp.commit(checkpoints=[th.step({"n": i, "log": [*range(i)]}, source=source, metadata=meta)])


@_check("history_order_limit_before")
async def _history_walk(env: _Env) -> None:
    """history() is newest first, walks parents, honours limit and before."""
    cp = await env.new()
    th = _Thread("t")
    await _ten_steps(cp, th)
    chain = th.lineage()
    await _same_history("history()", cp, th)
    ids = [c.id for c in chain]
    _same("history(limit=3)", [c.id for c in await cp.history("t", limit=3)], ids[:3])
    _same("history(limit=0)", [c.id for c in await cp.history("t", limit=0)], [])
    _same("history(limit=100)", [c.id for c in await cp.history("t", limit=100)], ids)
    _same("history(before=5th newest)", [c.id for c in await cp.history("t", before=ids[4])], ids[5:])
    _same("history(before=..., limit=2)", [c.id for c in await cp.history("t", before=ids[4], limit=2)], ids[5:7])
    _same("history(before=root)", [c.id for c in await cp.history("t", before=ids[-1])], [])
    _same("history(before=unknown id)", [c.id for c in await cp.history("t", before=new_checkpoint_id())], [])
    _same("history of another thread", await cp.history("other"), [])


@_check("history_filter")
async def _history_filter(env: _Env) -> None:
    """history(filter=...) keeps entries whose metadata has each key equal; bad keys raise."""
    cp = await env.new()
    th = _Thread("t")
    await _ten_steps(cp, th)
    chain = th.lineage()

    def ids(pred: Callable[[Checkpoint], bool]) -> list[str]:
        return [c.id for c in chain if pred(c)]

    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"source": "loop"}, ids(lambda c: c.metadata["source"] == "loop")),
        ({"source": "update"}, ids(lambda c: c.metadata["source"] == "update")),
        ({"step": 3}, ids(lambda c: c.step == 3)),
        ({"step": "3"}, []),
        ({"source": "loop", "step": 5}, ids(lambda c: c.step == 5)),
        ({"source": "update", "step": 5}, []),
        ({"label": "mark"}, ids(lambda c: c.metadata.get("label") == "mark")),
        ({"missing_key": 1}, []),
    ]
    for flt, want in cases:
        _same(f"history(filter={flt!r})", [c.id for c in await cp.history("t", filter=flt)], want)
    loops = ids(lambda c: c.metadata["source"] == "loop")
    _same(
        "history(filter=loop, limit=2)",
        [c.id for c in await cp.history("t", filter={"source": "loop"}, limit=2)],
        loops[:2],
    )
    for bad in ("bad key", "a;drop table x", "", "x'y", "a.b", "k" * 65):
        try:
            await cp.history("t", filter={bad: 1})
        except ValueError:
            continue
        _fail(f"history(filter={{{bad!r}: 1}}) did not raise ValueError")


@_check("history_follows_newest_branch")
async def _branches(env: _Env) -> None:
    """After time travel the head is the new branch; the old branch stays readable by id."""
    cp = await env.new()
    th = _Thread("t")
    r = th.step({"v": [0], "s": "root"}, root=True, source="input")
    a = th.step({"v": [0, 1]})
    b = th.step({"v": [0, 1, 2]})
    c = th.step({"v": [0, 1, 2, 3], "s": "old branch"})
    await cp.commit(checkpoints=[r, a, b, c])
    d = th.step({"v": [0, 1, 9]}, parent=a.checkpoint, source="fork")
    await cp.commit(checkpoints=[d])
    e = th.step({"s": "new branch"})
    await cp.commit(checkpoints=[e])

    def ids(cps: Iterable[Checkpoint]) -> list[str]:
        return [x.id for x in cps]

    _same_checkpoint("get() after time travel", await cp.get("t"), e.checkpoint)
    _same(
        "history() after time travel",
        ids(await cp.history("t")),
        ids([e.checkpoint, d.checkpoint, a.checkpoint, r.checkpoint]),
    )
    _same(
        "history(before=old tip)",
        ids(await cp.history("t", before=c.checkpoint.id)),
        ids([b.checkpoint, a.checkpoint, r.checkpoint]),
    )
    await _all_read_back("both branches", cp, th)
    infos = await cp.list_threads()
    _expect(len(infos) == 1 and infos[0].checkpoints == 6, f"list_threads() after a branch: {infos!r}")
    _expect(infos[0].head_id == e.checkpoint.id, f"list_threads() head is {infos[0].head_id}, expected the new tip")


@_check("list_threads")
async def _list_threads(env: _Env) -> None:
    """list_threads(): namespaces apart, counts, heads, newest head first; None lists all."""
    cp = await env.new()
    layout = [("", "t1", 3), ("ns1", "t1", 1), ("ns1", "t2", 2), ("", "t2", 1), ("ns2", "x", 2)]
    threads: dict[tuple[str, str], _Thread] = {}
    for ns, tid, n in layout:
        th = threads[(ns, tid)] = _Thread(tid, ns)
        await cp.commit(checkpoints=[th.step({"i": 0}, root=True, source="input")])
        for i in range(1, n):
            await cp.commit(checkpoints=[th.step({"i": i})])
    late = threads[("", "t1")]
    await cp.commit(checkpoints=[late.step({"i": 99}, source="update")])  # now the newest head

    def expected(ns: str | None) -> list[tuple[Any, ...]]:
        rows = []
        for (tns, tid), th in threads.items():
            if ns is None or tns == ns:
                head = th.head
                assert head is not None
                rows.append((head.id, tid, tns, head.step, head.created_at, head.metadata["source"], len(th.by_id)))
        return sorted(rows, reverse=True)

    def as_rows(infos: list[ThreadInfo]) -> list[tuple[Any, ...]]:
        for info in infos:
            _expect(isinstance(info, ThreadInfo), f"list_threads() returned a {type(info).__name__}")
        return [(i.head_id, i.thread_id, i.namespace, i.step, i.created_at, i.source, i.checkpoints) for i in infos]

    _same("list_threads()", as_rows(await cp.list_threads()), expected(None))
    for ns in ("", "ns1", "ns2", "unknown"):
        _same(f"list_threads(namespace={ns!r})", as_rows(await cp.list_threads(namespace=ns)), expected(ns))


@_check("namespaces_isolate")
async def _namespaces(env: _Env) -> None:
    """The same thread id in two namespaces is two threads, for every operation."""
    cp = await env.new()
    x, y = _Thread("same", ""), _Thread("same", "other")
    for th, tag in ((x, "x"), (y, "y")):
        await cp.commit(checkpoints=[th.step({"who": tag, "list": [tag]}, root=True)])
        await cp.commit(checkpoints=[th.step({"list": [tag, tag]})])
    await _all_read_back("namespace ''", cp, x)
    await _all_read_back("namespace 'other'", cp, y)
    _expect(await cp.get("same", y.lineage()[0].id) is None, "a checkpoint was found in the wrong namespace")
    await cp.acquire_lease("same", "owner-x")
    await cp.acquire_lease("same", "owner-y", namespace="other")  # a lease per namespace
    await cp.prune("same", keep_last=1)
    await _same_history("namespace 'other' after pruning ''", cp, y)
    await cp.delete_thread("same")
    await _all_read_back("namespace 'other' after deleting ''", cp, y)
    _expect(await cp.get("same") is None, "the deleted thread in namespace '' is still readable")


@_check("delete_thread")
async def _delete(env: _Env) -> None:
    """delete_thread removes checkpoints and pending writes, and nothing of other threads."""
    cp = await env.new()
    gone, stays = _Thread("gone"), _Thread("stays")
    for th in (gone, stays):
        await cp.commit(checkpoints=[th.step({"a": [1]}, root=True), th.step({"a": [1, 2]})])
        await cp.commit(
            writes=[
                WritesBatch(
                    thread_id=th.thread_id, checkpoint_id=th.lineage()[-1].id, writes=_writes(("t", "effect", "k", 1))
                )
            ]
        )
    await cp.delete_thread("gone")
    _expect(await cp.get("gone") is None, "get() finds a deleted thread")
    _expect(await cp.history("gone") == [], "history() of a deleted thread is not empty")
    for cid in gone.by_id:
        _expect(await cp.get("gone", cid) is None, f"checkpoint {cid} of a deleted thread is readable")
    _same("list_threads() after a delete", [t.thread_id for t in await cp.list_threads()], ["stays"])
    await _all_read_back("the other thread", cp, stays)
    await cp.delete_thread("gone")  # deleting what is not there is not an error
    await cp.delete_thread("never-existed", namespace="nope")
    # Re-creating a checkpoint with an old id must not resurrect the old pending writes.
    old_root = gone.lineage()[-1]
    again = CheckpointWrite(checkpoint=old_root, changed=frozenset(old_root.values))
    await cp.commit(checkpoints=[again])
    got = await cp.get("gone")
    _same_checkpoint("a re-created thread", got, old_root)
    assert got is not None
    _same_writes("a re-created checkpoint", got.pending_writes, ())
    infos = [t for t in await cp.list_threads() if t.thread_id == "gone"]
    _expect(len(infos) == 1 and infos[0].checkpoints == 1, f"a re-created thread is listed as {infos!r}")


@_check("prune_keeps_newest_per_branch")
async def _prune(env: _Env) -> None:
    """prune keeps the keep_last newest of every branch lineage, reading back identically."""
    cp = await env.new()
    th = _Thread("t")
    r = th.step({"log": [0], "big": {"k0": "v" * 50}, "const": "root only"}, root=True)
    await cp.commit(checkpoints=[r])
    for i in range(1, 8):
        await cp.commit(
            checkpoints=[th.step({"log": [*range(i + 1)], "big": {f"k{j}": "v" * 50 for j in range(i + 1)}})]
        )
    tip = th.head
    assert tip is not None
    fork_from = th.lineage()[4]  # step 3
    branch = th.step({"log": [*range(4), 99]}, parent=fork_from, source="fork")
    await cp.commit(checkpoints=[branch])
    branch2 = th.step({"const": "changed on the branch"})
    await cp.commit(checkpoints=[branch2])
    pending = _writes(("t", "result", "", {"writes": [["log", 5]], "routes": []}))
    await cp.commit(writes=[WritesBatch(thread_id="t", checkpoint_id=tip.id, writes=pending)])
    other = _Thread("other")
    await cp.commit(checkpoints=[other.step({"a": 1}, root=True), other.step({"a": 2})])

    keep = {c.id for c in th.lineage(tip)[:3]} | {c.id for c in th.lineage(branch2.checkpoint)[:3]}
    dropped = await cp.prune("t", keep_last=3)
    _expect(dropped == len(th.by_id) - len(keep), f"prune returned {dropped}, expected {len(th.by_id) - len(keep)}")
    for cid, want in th.by_id.items():
        got = await cp.get("t", cid)
        if cid in keep:
            _expect(got is not None, f"prune dropped {cid}, one of the keep_last newest of a branch")
            assert got is not None
            _same_checkpoint(f"kept checkpoint {cid}", replace(got, parent_id=want.parent_id), want)
        else:
            _expect(got is None, f"prune kept {cid}, which is not among the keep_last newest of any branch")
    got_tip = await cp.get("t", tip.id)
    assert got_tip is not None
    _same_writes("pending writes of a kept checkpoint", got_tip.pending_writes, pending)
    _same("history() after prune", [c.id for c in await cp.history("t")], [c.id for c in th.lineage()[:3]])
    infos = {t.thread_id: t for t in await cp.list_threads()}
    _expect(infos["t"].checkpoints == len(keep), f"list_threads() counts {infos['t'].checkpoints} after prune")
    await _all_read_back("another thread after prune", cp, other)
    _expect(await cp.prune("t", keep_last=3) == 0, "a second prune with the same keep_last dropped more")
    _expect(await cp.prune("never-existed", keep_last=1) == 0, "prune of an unknown thread did not return 0")
    try:
        await cp.prune("t", keep_last=0)
    except ValueError:
        pass
    else:
        _fail("prune(keep_last=0) did not raise ValueError")
    after = th.step({"log": [*range(4), 99, 100]})  # only 'log' changed; the rest comes from kept data
    await cp.commit(checkpoints=[after])
    _same_checkpoint("a child committed after prune", await cp.get("t"), after.checkpoint)


@_check("leases")
async def _leases(env: _Env) -> None:
    """One owner per thread: renew by the same owner, ThreadBusyError for others, release."""
    cp = await env.new()
    await cp.acquire_lease("t", "A", ttl=30)
    await cp.acquire_lease("t", "A", ttl=30)  # renewal
    try:
        await cp.acquire_lease("t", "B", ttl=30)
    except ThreadBusyError as exc:
        _busy(exc, "t", "A", 30)
    else:
        _fail("a second owner acquired a held lease")
    await cp.release_lease("t", "B")  # not the holder: no effect
    try:
        await cp.acquire_lease("t", "B")
    except ThreadBusyError:
        pass
    else:
        _fail("release_lease by a non-holder released the lease")
    await cp.acquire_lease("u", "B")  # other threads are free
    await cp.release_lease("t", "A")
    await cp.acquire_lease("t", "B")
    try:
        await cp.acquire_lease("t", "A")
    except ThreadBusyError as exc:
        _busy(exc, "t", "B", cp.lease_ttl)
    else:
        _fail("the lease taken after a release is not held")
    await cp.release_lease("never-leased", "A")


@_check("lease_expiry")
async def _lease_expiry(env: _Env) -> None:
    """An expired lease can be taken over; a renewal pushes the expiry out."""
    cp = await env.new()
    await cp.acquire_lease("short", "A", ttl=0.2)
    await cp.acquire_lease("renewed", "A", ttl=0.2)
    await cp.acquire_lease("renewed", "A", ttl=60)
    await asyncio.sleep(0.6)
    await cp.acquire_lease("short", "B", ttl=30)  # expired: taken over
    try:
        await cp.acquire_lease("renewed", "B")
    except ThreadBusyError as exc:
        _busy(exc, "renewed", "A", 60)
    else:
        _fail("a renewed lease expired at its original ttl")
    try:
        await cp.acquire_lease("short", "A")
    except ThreadBusyError as exc:
        _busy(exc, "short", "B", 30)
    else:
        _fail("the previous holder took back a lease another owner had taken over")


AWKWARD: tuple[str, ...] = (
    "it's",
    'say "hi"',
    "a;b; DROP TABLE checkpoints;--",
    "../../etc/passwd",
    "/abs/path",
    "a/b\\c",
    "..",
    ".",
    "",
    " ",
    "\n\t",
    "%2F..%2F",
    "CON",
    "nul.txt",
    "Case",
    "case",
    "CASE",
    "\u00fcn\u00efc\u00f8d\u00e9 \u2713 \U0001f9f5",
    "x" * 10_000,
    "x" * 9_999 + "y",
    "\u00e9" * 5_000,
)
"""Thread ids (and namespaces) that have broken stores: quotes, SQL, paths, case, length."""


@_check("awkward_strings")
async def _awkward(env: _Env) -> None:
    """Ids, namespaces and metadata with quotes, paths, unicode and 10 KB lengths round-trip."""
    cp = await env.new()
    threads: list[_Thread] = []
    for i, tid in enumerate(AWKWARD):
        ns = AWKWARD[(i * 7 + 3) % len(AWKWARD)] if i % 3 == 0 else ""
        th = _Thread(tid, ns)
        threads.append(th)
        meta = {"label": tid, "quote": "'\";--", tid[:100] or "k": "v" * 10_000}
        await cp.commit(checkpoints=[th.step({"id": tid, tid[:50] or "e": [i]}, root=True, metadata=meta)])
        await cp.commit(checkpoints=[th.step({"id": tid + "!"}, metadata=meta)])
        batch = WritesBatch(
            thread_id=tid, namespace=ns, checkpoint_id=th.lineage()[0].id, writes=_writes((tid, "effect", tid, tid))
        )
        await cp.commit(writes=[batch])
    for th in threads:
        what = f"thread {th.thread_id[:40]!r} (namespace {th.namespace[:40]!r})"
        await _all_read_back(what, cp, th)
        await _same_history(what, cp, th)
        got = await cp.get(th.thread_id, namespace=th.namespace)
        assert got is not None
        _same_writes(what, got.pending_writes, _writes((th.thread_id, "effect", th.thread_id, th.thread_id)))
    listed = sorted((t.namespace, t.thread_id, t.checkpoints) for t in await cp.list_threads())
    _same("list_threads() of awkward ids", listed, sorted((t.namespace, t.thread_id, 2) for t in threads))
    victim = threads[3]  # "../../etc/passwd"
    await cp.delete_thread(victim.thread_id, namespace=victim.namespace)
    _expect(len(await cp.list_threads()) == len(threads) - 1, "deleting one awkward thread removed others")
    for th in threads[4:]:
        await _all_read_back(f"after deleting {victim.thread_id!r}", cp, th)
    await cp.acquire_lease(AWKWARD[-3], "owner 'with' \"quotes\"")
    try:
        await cp.acquire_lease(AWKWARD[-3], "other")
    except ThreadBusyError as exc:
        _busy(exc, AWKWARD[-3], "owner 'with' \"quotes\"", cp.lease_ttl)
    else:
        _fail("a lease on a 10 KB thread id was not held")


@_check("nul_characters")
async def _nul(env: _Env) -> None:
    """A NUL in an id, namespace, metadata or value round-trips or is refused with a PlaitError."""
    cp = await env.new()
    cases: list[tuple[str, str, str, Mapping[str, Any], Mapping[str, Any]]] = [
        ("thread id", "a\x00b", "", {}, {"v": 1}),
        ("namespace", "t1", "n\x00s", {}, {"v": 1}),
        ("metadata", "t2", "", {"label": "x\x00y"}, {"v": 1}),
        ("channel value", "t3", "", {}, {"v": "x\x00y", "w": ["\x00"]}),
        ("channel name", "t4", "", {}, {"a\x00b": 1}),
    ]
    for what, tid, ns, meta, values in cases:
        th = _Thread(tid, ns)
        cw = th.step(values, root=True, metadata=meta)
        try:
            await cp.commit(checkpoints=[cw])
        except PlaitError:
            _expect(await cp.get(tid, namespace=ns) is None, f"a NUL in a {what} was refused but partly stored")
            continue
        _same_checkpoint(f"a NUL in a {what}", await cp.get(tid, namespace=ns), cw.checkpoint)
    fine = _Thread("after-nul")
    cw = fine.step({"v": 1}, root=True)
    await cp.commit(checkpoints=[cw])
    _same_checkpoint("a commit after the NUL cases", await cp.get("after-nul"), cw.checkpoint)


@_check("concurrent_calls")
async def _concurrent(env: _Env) -> None:
    """Concurrent commits and reads from several tasks on one instance all land intact."""
    cp = await env.new()
    threads = [_Thread(f"c{i}") for i in range(6)]

    async def run(th: _Thread) -> None:
        await cp.commit(checkpoints=[th.step({"log": [], "who": th.thread_id}, root=True)])
        for j in range(6):
            head = th.head
            assert head is not None
            await cp.commit(checkpoints=[th.step({"log": [*head.values["log"], j]})])
            await cp.get(th.thread_id)
            await cp.list_threads()

    await asyncio.gather(*(run(th) for th in threads))
    for th in threads:
        await _all_read_back(f"thread {th.thread_id} written concurrently", cp, th)
    _expect(len(await cp.list_threads()) == len(threads), "list_threads() lost a concurrently written thread")


@_check("setup_is_idempotent")
async def _setup_twice(env: _Env) -> None:
    """setup() on a store that is set up and holds data is safe and keeps the data."""
    cp = await env.new()
    th = _Thread("t")
    await cp.commit(checkpoints=[th.step({"a": [1]}, root=True), th.step({"a": [1, 2]})])
    await cp.setup()
    await cp.setup()
    await _all_read_back("after setup() again", cp, th)


@_check("durable_after_reopen", needs_reopen=True)
async def _durable(env: _Env) -> None:
    """Everything committed reads back from a new instance over the same storage."""
    cp = await env.new()
    main, other = _Thread("main"), _Thread("main", "ns")
    await cp.commit(checkpoints=[main.step(SAMPLE, root=True, source="input")])
    for i in range(12):
        head = main.head
        assert head is not None
        await cp.commit(checkpoints=[main.step({"messages": [*head.values["messages"], {"id": f"m{i}"}], "count": i})])
    branch = main.step({"text": "branch"}, parent=main.lineage()[5], source="fork")
    await cp.commit(checkpoints=[branch, other.step({"x": 1}, root=True)])
    pending = _writes(
        ("t", "result", "", {"writes": [["count", 1]], "routes": []}), ("t", "effect", "pay", {"ok": True})
    )
    await cp.commit(writes=[WritesBatch(thread_id="main", checkpoint_id=branch.checkpoint.id, writes=pending)])
    await cp.acquire_lease("main", "holder", ttl=60)
    listed = await cp.list_threads()

    cp = await env.reopen(cp)
    await _all_read_back("after reopen", cp, main)
    await _all_read_back("after reopen (namespace 'ns')", cp, other)
    await _same_history("after reopen", cp, main)
    got = await cp.get("main")
    assert got is not None
    _same_writes("after reopen", got.pending_writes, pending)
    _same("list_threads() after reopen", await cp.list_threads(), listed)
    try:
        await cp.acquire_lease("main", "intruder")
    except ThreadBusyError as exc:
        _busy(exc, "main", "holder", 60)
    else:
        _fail("a lease did not survive reopening the store")
    more = main.step({"count": 100}, fold=True)
    await cp.commit(checkpoints=[more])
    cp = await env.reopen(cp)
    await _all_read_back("after a second reopen", cp, main)
    await cp.prune("main", keep_last=2)
    cp = await env.reopen(cp)
    for want in main.lineage()[:2]:
        got = await cp.get("main", want.id)
        _expect(got is not None, f"checkpoint {want.id} kept by prune is gone after reopen")
        assert got is not None
        _same_checkpoint("after prune and reopen", replace(got, parent_id=want.parent_id), want)


CHECKS: tuple[Check, ...] = tuple(_REGISTRY)
"""Every check, in a stable order; each can be run on its own."""


# --------------------------------------------------------------------------------------
# Running them


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
    env = _Env(factory, reopen)
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
