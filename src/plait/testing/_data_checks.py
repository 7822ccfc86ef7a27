"""Checks that channel values, and every other field of a checkpoint, read back as committed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plait.checkpoint.model import Task, new_checkpoint_id
from plait.testing._harness import Checks, Env, ThreadBuilder, all_read_back, expect, same_checkpoint, same_history

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


check = Checks()


@check("root_round_trip")
async def _root_round_trip(env: Env) -> None:
    """A root checkpoint reads back exactly (head and by id): every field, values frozen."""
    cp = await env.new()
    th = ThreadBuilder("t")
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
    await cp.acommit(checkpoints=[cw])
    want = cw.checkpoint
    head = await cp.aget("t")
    same_checkpoint("get('t')", head, want)
    same_checkpoint("get('t', id)", await cp.aget("t", want.id), want)
    assert head is not None
    expect(head.pending_writes == (), f"a checkpoint with no pending writes came back with {head.pending_writes!r}")
    expect(head.version == want.version, f"version is {head.version}, expected {want.version}")
    for task in head.next_tasks:
        expect(isinstance(task, Task), f"next_tasks holds a {type(task).__name__}, expected Task")
    for key, value in head.barriers.items():
        expect(isinstance(value, tuple), f"barrier {key!r} came back as {type(value).__name__}, expected tuple")


@check("root_values_stored_without_changed")
async def _root_without_changed(env: Env) -> None:
    """``changed`` is relative to the parent: a root's values are stored even if it is empty."""
    cp = await env.new()
    th = ThreadBuilder("t")
    cw = th.step({"a": [1, 2], "b": {"x": "y"}}, root=True)
    await cp.acommit(checkpoints=[replace(cw, changed=frozenset())])
    same_checkpoint("a root committed with changed=frozenset()", await cp.aget("t"), cw.checkpoint)


@check("get_missing_returns_none")
async def _get_missing(env: Env) -> None:
    """get() of an unknown thread, id, or namespace is None; reads of nothing are empty."""
    cp = await env.new()
    expect(await cp.aget("nope") is None, "get() of a thread never written is not None")
    expect(await cp.ahistory("nope") == [], "history() of a thread never written is not []")
    expect(await cp.alist_threads() == [], "list_threads() of an empty store is not []")
    th = ThreadBuilder("t")
    cw = th.step({"a": 1}, root=True)
    await cp.acommit(checkpoints=[cw])
    expect(await cp.aget("t", new_checkpoint_id()) is None, "get() of an unknown checkpoint id is not None")
    expect(await cp.aget("other", cw.checkpoint.id) is None, "get() found a checkpoint under another thread's id")
    expect(await cp.aget("t", namespace="ns") is None, "get() found a thread in a namespace it was not written to")
    await cp.acommit()  # an empty commit is a no-op
    same_checkpoint("after an empty commit", await cp.aget("t"), cw.checkpoint)


@check("unchanged_channels_inherit")
async def _unchanged_inherit(env: Env) -> None:
    """Only ``changed`` channels are new in a child; the others read back from its ancestors."""
    cp = await env.new()
    th = ThreadBuilder("t")
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
        await cp.acommit(checkpoints=[th.step(updates, root=i == 0)])
        same_checkpoint(f"head after step {i}", await cp.aget("t"), th.head)  # type: ignore[arg-type]
    await all_read_back("chain with partial changes", cp, th)
    await same_history("chain with partial changes", cp, th)


@check("long_append_only_list")
async def _long_append(env: Env) -> None:
    """An append-only list over many steps reads back right at every checkpoint, by id too."""
    cp = await env.new()
    th = ThreadBuilder("chat")
    await cp.acommit(checkpoints=[th.step({"messages": [], "phase": "start", "turns": 0}, root=True)])
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
        await cp.acommit(checkpoints=[th.step(updates)])
    await all_read_back("append-only list", cp, th)
    await same_history("append-only list", cp, th)
    middle = th.lineage()[60]
    same_checkpoint("a middle checkpoint by id", await cp.aget("chat", middle.id), middle)


@check("value_shape_changes")
async def _shape_changes(env: Env) -> None:
    """A channel whose value shrinks, is replaced, or changes type reads back exactly."""
    cp = await env.new()
    th = ThreadBuilder("t")
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
    await cp.acommit(checkpoints=[th.step({"x": sequence[0], "steady": [1]}, root=True)])
    for value in sequence[1:]:
        await cp.acommit(checkpoints=[th.step({"x": value})])
    await all_read_back("changing shapes", cp, th)


@check("dict_channel_updates_and_deletions")
async def _dict_channel(env: Env) -> None:
    """A dict channel with keys added, changed and deleted reads back right at every step."""
    cp = await env.new()
    th = ThreadBuilder("t")
    current: dict[str, Any] = {"a": 1, "b": {"deep": [1, 2]}, "weird key/..": "v"}
    await cp.acommit(checkpoints=[th.step({"m": current}, root=True)])
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
        await cp.acommit(checkpoints=[th.step({"m": current})])
    await all_read_back("dict channel", cp, th)
    await same_history("dict channel", cp, th)
