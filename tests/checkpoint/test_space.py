"""Sizes per namespace and thread: a subgraph's namespaces are counted with the thread that
ran them, a namespace that only looks like a subgraph's stays its own, and the memory store
(which knows no bytes) still counts threads and checkpoints."""

from __future__ import annotations

import pytest

from plait import END, START, AppendList, Graph, MemoryCheckpointer, StateSchema
from plait.checkpoint.space import ThreadSpace, subgraph_parent, summarize
from plait.engine.subgraph import child_namespace

TASK = "0123456789abcdef"


@pytest.mark.parametrize("parent", ["", "team", "team|outer:fedcba9876543210", "a:b"])
def test_subgraph_parent_inverts_child_namespace(parent: str) -> None:
    assert subgraph_parent(child_namespace(parent, "node", TASK)) == parent
    assert subgraph_parent(child_namespace(parent, "a:b", TASK)) == parent  # a node name with a colon


@pytest.mark.parametrize("namespace", ["", "team", "team:alpha", f"x:{TASK[:-1]}", f"x:{TASK.upper()}"])
def test_a_namespace_of_another_shape_has_no_parent(namespace: str) -> None:
    assert subgraph_parent(namespace) is None


def _t(namespace: str, thread_id: str, checkpoints: int, size: int | None) -> ThreadSpace:
    return ThreadSpace(namespace=namespace, thread_id=thread_id, checkpoints=checkpoints, bytes=size)


def test_summarize_folds_subgraphs_into_their_parent_thread_and_ranks_the_largest() -> None:
    child = child_namespace("", "sub", TASK)
    grandchild = child_namespace(child, "inner", "fedcba9876543210")
    look_alike = f"ops:{TASK}"  # a user namespace of a subgraph's shape, with no parent stored for "z"
    namespaces, largest = summarize(
        [
            _t("", "a", 3, 300),
            _t(child, "a", 2, 200),
            _t(grandchild, "a", 1, 100),
            _t("", "b", 5, 50),
            _t("team", "c", 1, 1000),
            _t(look_alike, "z", 2, 20),
        ],
        top=2,
    )
    assert [(n.namespace, n.threads, n.checkpoints, n.bytes) for n in namespaces] == [
        ("", 2, 11, 650),
        ("ops:" + TASK, 1, 2, 20),
        ("team", 1, 1, 1000),
    ]
    assert [(t.namespace, t.thread_id, t.checkpoints, t.bytes) for t in largest] == [
        ("team", "c", 1, 1000),
        ("", "a", 6, 600),
    ]


def test_unknown_bytes_stay_unknown_and_rank_by_checkpoints() -> None:
    namespaces, largest = summarize([_t("", "a", 1, None), _t("", "b", 4, None)])
    assert namespaces[0].bytes is None and namespaces[0].checkpoints == 5
    assert [t.thread_id for t in largest] == ["b", "a"]


def test_the_memory_store_counts_threads_with_their_subgraphs() -> None:
    schema = StateSchema.builder().add("log", AppendList()).build()
    inner = Graph(schema)
    inner.add_node("work", lambda s: {"log": ["w"]})
    inner.add_edge(START, "work").add_edge("work", END)
    outer = Graph(schema)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub").add_edge("sub", END)
    store = MemoryCheckpointer()
    outer.compile(checkpointer=store).invoke({"log": []}, thread_id="t")
    space = store.space()
    assert len({t.namespace for t in space.threads}) == 2 and space.dead is None  # the subgraph's, as stored
    namespaces, largest = summarize(space.threads)
    assert [(n.namespace, n.threads, n.bytes) for n in namespaces] == [("", 1, None)]
    assert largest[0].checkpoints == sum(t.checkpoints for t in space.threads)
    assert store.reclaim_space() is None  # nothing on disk to give back
