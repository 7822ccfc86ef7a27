"""Retention (plait.Retention, Checkpointer.sweep): the policy's checks, the report's JSON, and
subgraph namespaces swept with their parent thread, on every backend. The sweep's contract
itself (every remaining thread resumes) is in plait.testing's retention checks, run on every
backend by test_conformance.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    Checkpointer,
    Command,
    Graph,
    Retention,
    RetentionError,
    StateSchema,
    interrupt,
)
from plait.checkpoint import open as open_store
from plait.checkpoint.model import ThreadInfo
from plait.checkpoint.retention import group_threads, parent_namespaces, thread_policy

_SEG = "ask:0123456789abcdef"


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"after": 0}, "after=0"),
        ({"after": -5}, "after=-5"),
        ({"after": True}, "after=True"),
        ({"after": float("inf")}, "after=inf"),
        ({"after": 10, "action": "drop"}, "action='drop'"),
        ({"after": 10, "keep_interrupted": "yes"}, "keep_interrupted='yes'"),
    ],
)
def test_a_policy_refuses_what_it_cannot_apply(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(RetentionError, match=says) as caught:
        Retention(**kwargs)
    assert isinstance(caught.value, ValueError)


def test_a_threads_own_policy_reads_back_from_its_json_or_says_what_is_wrong() -> None:
    policy = Retention(after=86400, action="keep_latest", keep_interrupted=False)
    assert thread_policy({"retention": policy.to_json()}, thread_id="t") == policy
    assert thread_policy({"retention": "never"}, thread_id="t") == "never"
    assert thread_policy({"source": "loop"}, thread_id="t") is None
    with pytest.raises(RetentionError, match="thread 't'.*no 'after'"):
        thread_policy({"retention": {"action": "delete"}}, thread_id="t")
    with pytest.raises(RetentionError, match="keys \\['ttl'\\]"):
        thread_policy({"retention": {"after": 1, "ttl": 2}}, thread_id="t")


def test_subgraph_namespaces_are_read_by_their_shape() -> None:
    assert parent_namespaces(f"{_SEG}|b:fedcba9876543210#2") == [_SEG, ""]
    assert parent_namespaces("tenant-a") == []
    assert parent_namespaces("tenant|not:a-task") == []


def _info(namespace: str, thread_id: str = "t") -> ThreadInfo:
    return ThreadInfo(
        thread_id=thread_id,
        namespace=namespace,
        status="idle",
        head_id="x",
        step=0,
        created_at=0.0,
        updated_at=0.0,
        source="loop",
        checkpoints=1,
    )


def test_a_thread_is_grouped_with_its_subgraphs_namespaces() -> None:
    infos = [_info(f"{_SEG}|b:fedcba9876543210"), _info(_SEG), _info(""), _info(_SEG, "other")]
    groups = group_threads(infos)
    assert sorted(groups) == [("", "t"), (_SEG, "other")]
    assert [i.namespace for i in groups[("", "t")]] == ["", _SEG, f"{_SEG}|b:fedcba9876543210"]


def _parent(cp: Checkpointer) -> Any:
    """outer: prep -> ask (a subgraph that asks) -> END."""
    schema = StateSchema.builder().add("log", AppendList()).build()
    inner = Graph(schema).add_node("q", lambda s: {"log": [f"q={interrupt('q?')}"]})
    inner.add_edge(START, "q").add_edge("q", END)
    outer = Graph(schema).add_node("prep", lambda s: {"log": ["prep"]}).add_node("ask", inner.compile())
    outer.add_edge(START, "prep").add_edge("prep", "ask").add_edge("ask", END)
    return outer.compile(cp)


def test_a_subgraphs_namespace_is_listed_and_swept_with_its_thread(make_saver: Callable[..., Checkpointer]) -> None:
    cp = make_saver()
    app = _parent(cp)
    app.invoke({}, thread_id="t")
    listed = {t.namespace for t in cp.list_threads() if t.thread_id == "t"}
    assert len(listed) == 2, f"the thread and its subgraph's namespace are listed: {listed}"
    child = next(ns for ns in listed if ns)
    assert parent_namespaces(child) == [""]
    cp.set_retention(Retention(after=60, action="keep_latest", keep_interrupted=False))
    report = cp.sweep(at=cp.store_time() + 3600)
    assert report.reduced == (("", "t"),)
    assert len(cp.tree("t", namespace=child)) == 1, "the running subgraph keeps its head"
    out = app.invoke(Command(resume="yes"), thread_id="t")
    assert out["log"] == ["prep", "q=yes"]
    lease = cp.take_lease("t", "a run")
    cp.set_retention(Retention(after=60))
    busy = cp.sweep(at=cp.store_time() + 3600)
    assert busy.skipped_busy == (("", "t"),) and busy.deleted == ()
    cp.release_lease(lease)
    gone = cp.sweep(at=cp.store_time() + 3600)
    assert gone.deleted == (("", "t"),)
    assert cp.list_threads() == [], "the subgraph's namespace went with its thread"
    assert gone.to_json()["deleted"] == [{"namespace": "", "thread_id": "t"}]


def test_every_backend_and_open_take_a_policy(tmp_path: Any) -> None:
    policy = Retention(after=30 * 86400, action="keep_latest")
    for address in ("memory:", str(tmp_path / "a.db"), (tmp_path / "files").as_uri()):
        cp = open_store(address, retention=policy)
        assert cp.retention == policy
        cp.close()
    with pytest.raises(RetentionError, match="is not a Retention"):
        open_store("memory:", retention={"after": 1})


def _counter(cp: Checkpointer) -> Any:
    g = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("n", lambda s: {"log": ["n"]})
    g.add_edge(START, "n").add_edge("n", END)
    return g.compile(cp)


def test_a_threads_own_policy_given_once_lasts_over_later_runs_and_updates(
    make_saver: Callable[..., Checkpointer],
) -> None:
    cp = make_saver()
    app = _counter(cp)
    app.invoke({}, thread_id="kept", metadata={"retention": "never"})
    app.invoke({}, thread_id="short", metadata={"retention": {"after": 60}})
    app.invoke({}, thread_id="dropped", metadata={"retention": {"after": 60}})
    for tid in ("kept", "short", "dropped"):  # later runs and an update name no policy
        app.invoke({}, thread_id=tid, metadata={"user": "u1"})
        app.update_state(tid, {"log": ["edit"]})
    app.invoke({}, thread_id="dropped", metadata={"retention": None})
    assert cp.get("short") is not None and cp.get("short").metadata["retention"] == {"after": 60}  # type: ignore[union-attr]
    cp.set_retention(Retention(after=86400))
    report = cp.sweep(at=cp.store_time() + 3600)
    assert report.deleted == (("", "short"),), "its own one-minute policy still applies"
    later = cp.sweep(at=cp.store_time() + 2 * 86400)
    assert later.deleted == (("", "dropped"),), "'never' lasted; the dropped policy left the store's"
    assert [t.thread_id for t in cp.list_threads()] == ["kept"]
