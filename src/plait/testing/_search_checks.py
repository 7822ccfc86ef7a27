"""Checks of thread search: ``alist_threads(metadata=...)`` keeps the threads whose head's
metadata contains the filter, by one rule on every backend (see :mod:`plait.checkpoint._match`)."""

from __future__ import annotations

import asyncio
from typing import Any

from plait.checkpoint.model import Task
from plait.testing._harness import Checks, Env, ThreadBuilder, same
from plait.testing._status_checks import refused_listing

check = Checks()

_THREADS: dict[str, dict[str, Any]] = {
    "a": {
        "user": "ada",
        "n": 1,
        "run": {"attempt": 2, "tags": ["x", "y"]},
        "flag": True,
        "none": None,
        "deep": {"a": {"b": {"c": "d"}}},
        "odd key \"'.[$": "yes",
    },
    "b": {"user": "bob", "n": 1.0, "run": {"attempt": 2}, "flag": 1, "none": "null", "deep": {"a": {"b": "c"}}},
    "c": {"user": "ada", "n": "1", "run": [2], "flag": False, "deep": {"a": [{"b": {"c": "d"}}]}, "ünï": "ç"},
}

_EXPECTED: tuple[tuple[dict[str, Any], list[str]], ...] = (
    ({"user": "ada"}, ["a", "c", "ready-ada"]),
    ({"user": "ada", "flag": True}, ["a"]),
    ({"n": 1}, ["a", "b"]),  # 1 equals 1.0; never "1" or true
    ({"n": 1.0}, ["a", "b"]),
    ({"flag": True}, ["a"]),  # true is not 1
    ({"flag": 1}, ["b"]),
    ({"flag": False}, ["c"]),
    ({"none": None}, ["a"]),  # null is not "null", nor a missing key
    ({"none": "null"}, ["b"]),
    ({"run": {"attempt": 2}}, ["a", "b"]),  # objects by containment
    ({"run": {}}, ["a", "b"]),  # any object
    ({"run": {"tags": ["x", "y"]}}, ["a"]),  # lists by equality: same length, same order
    ({"run": {"tags": ["x"]}}, []),
    ({"run": {"tags": ["y", "x"]}}, []),
    ({"run": [2]}, ["c"]),
    ({"run": {"0": 2}}, []),  # a key is not a list position
    ({"deep": {"a": {"b": {"c": "d"}}}}, ["a"]),
    ({"deep": {"a": {"b": {}}}}, ["a"]),
    ({"deep": {"a": [{"b": {}}]}}, ["c"]),  # objects in lists by containment too
    ({"odd key \"'.[$": "yes"}, ["a"]),
    ({"ünï": "ç"}, ["c"]),
    ({"user": "nobody"}, []),
    ({"missing": None}, []),
    ({"source": "loop"}, ["a", "b", "c", "ready-ada", "ready-bob"]),  # the head's, not an older checkpoint's
    ({}, ["a", "b", "c", "ready-ada", "ready-bob"]),
)


@check("thread_metadata")
async def _thread_metadata(env: Env) -> None:
    """alist_threads(metadata=): the heads whose metadata contains it (objects by containment,
    lists and scalars by equality, no type coercion), with the status filter, the paging and
    the namespaces; a filter that is not a JSON object is refused."""
    cp = await env.new()
    for name, meta in _THREADS.items():
        th = ThreadBuilder(name)
        await cp.acommit(checkpoints=[th.step({"n": 0}, root=True, source="input", metadata={"user": "old"})])
        await asyncio.sleep(0.002)  # distinct times: the order is the order of activity
        await cp.acommit(checkpoints=[th.step({"n": 1}, metadata=meta)])
    for who in ("ada", "bob"):
        th = ThreadBuilder(f"ready-{who}")
        await cp.acommit(checkpoints=[th.step({"n": 1}, root=True)])
        await asyncio.sleep(0.002)
        await cp.acommit(checkpoints=[th.step({"n": 2}, metadata={"user": who}, next_tasks=(Task(id="t", node="a"),))])
    other = ThreadBuilder("a", namespace="other")
    await cp.acommit(checkpoints=[other.step({"n": 0}, root=True, source="input", metadata={"user": "ada"})])

    async def ids(**kw: Any) -> list[str]:
        return sorted(t.thread_id for t in await cp.alist_threads(namespace="", **kw))

    for metadata, expected in _EXPECTED:
        same(f"list_threads(metadata={metadata!r})", await ids(metadata=metadata), expected)
    same("metadata user=old (only older checkpoints hold it)", await ids(metadata={"user": "old"}), [])
    same("metadata user=ada, status ready", await ids(metadata={"user": "ada"}, status="ready"), ["ready-ada"])
    same("metadata user=ada, status idle", await ids(metadata={"user": "ada"}, status="idle"), ["a", "c"])
    same("metadata user=bob, status interrupted", await ids(metadata={"user": "bob"}, status="interrupted"), [])
    every = [t.thread_id for t in await cp.alist_threads(metadata={"user": "ada"})]
    same("metadata user=ada in every namespace", sorted(every), ["a", "a", "c", "ready-ada"])
    paged: list[str] = []
    before = None
    while True:
        page = await cp.alist_threads(metadata={"user": "ada"}, limit=1, before=before)
        paged += [t.thread_id for t in page]
        if not page:
            break
        before = page[-1].cursor
    same("metadata user=ada paged one at a time, newest first", paged, every)
    same("metadata user=ada, limit 2", len(await cp.alist_threads(metadata={"user": "ada"}, limit=2)), 2)
    for bad in ("user=ada", ["user"], {1: "a"}, {"a": {1, 2}}, {"a": float("nan")}, {"a": object()}):
        await refused_listing(cp, metadata=bad)
