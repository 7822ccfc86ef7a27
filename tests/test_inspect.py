"""The inspection service: listings, history, state, per-channel diffs and copies, read through
the Checkpointer protocol only, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    AppendMessages,
    Checkpoint,
    Checkpointer,
    CheckpointNotFoundError,
    Command,
    Graph,
    MergeMap,
    StateSchema,
    ThreadDiff,
    ThreadExistsError,
    ThreadState,
    interrupt,
)
from plait import inspect as ins


def schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add_lww("topic")
        .add("messages", AppendMessages())
        .add("notes", AppendList())
        .add("sources", MergeMap())
        .add_lww("answer")
        .build()
    )


def research(state: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "notes": [f"on {state['topic']}"],
        "sources": {"web": 2},
        "messages": [{"id": "m1", "role": "tool", "content": "found"}],
    }


def ask(state: Mapping[str, Any]) -> dict[str, Any]:
    answer = interrupt({"ask": "ok?"})
    return {"answer": answer, "messages": [{"id": "m2", "role": "user", "content": str(answer)}]}


def build(saver: Checkpointer) -> Any:
    g = Graph(schema())
    g.add_node("research", research).add_node("ask", ask)
    g.add_edge(START, "research").add_edge("research", "ask").add_edge("ask", END)
    return g.compile(checkpointer=saver)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def saver(make_saver: Callable[..., Checkpointer]) -> Checkpointer:
    return make_saver()


def test_listing_pages_with_cursors_and_filters_by_status_prefix_and_metadata(saver: Checkpointer) -> None:
    app = build(saver)
    for name in ("alpha-1", "alpha-2", "beta-1"):
        app.invoke({"topic": name}, thread_id=name)
    app.invoke(Command(resume="yes"), thread_id="alpha-2")
    first = run(ins.list_threads(saver, limit=2))
    assert len(first.threads) == 2 and first.next_cursor is not None
    rest = run(ins.list_threads(saver, limit=2, before=first.next_cursor))
    assert rest.next_cursor is None
    assert sorted(t.thread_id for t in (*first.threads, *rest.threads)) == ["alpha-1", "alpha-2", "beta-1"]
    waiting = run(ins.list_threads(saver, status="interrupted"))
    assert sorted(t.thread_id for t in waiting.threads) == ["alpha-1", "beta-1"]
    alphas = run(ins.list_threads(saver, prefix="alpha-", limit=1))
    assert len(alphas.threads) == 1 and alphas.next_cursor is not None
    more = run(ins.list_threads(saver, prefix="alpha-", limit=1, before=alphas.next_cursor))
    assert {alphas.threads[0].thread_id, more.threads[0].thread_id} == {"alpha-1", "alpha-2"}
    assert more.next_cursor is None
    done = run(ins.list_threads(saver, metadata={"source": "loop"}, status="idle"))
    assert [t.thread_id for t in done.threads] == ["alpha-2"]
    assert run(ins.list_threads(saver, metadata={"source": "nothing"})).threads == ()


def test_summary_names_the_next_nodes_and_the_waiting_interrupt(saver: Checkpointer) -> None:
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="t")
    s = run(ins.thread_summary(saver, "t"))
    assert s.info.status == "interrupted" and s.next == ("ask",)
    assert [i.value for i in s.interrupts] == [{"ask": "ok?"}] and s.errors == ()
    app.invoke(Command(resume="yes"), thread_id="t")
    s = run(ins.thread_summary(saver, "t"))
    assert s.info.status == "idle" and s.next == () and s.interrupts == ()
    with pytest.raises(CheckpointNotFoundError):
        run(ins.thread_summary(saver, "nope"))


def test_history_pages_newest_first_and_unknown_threads_are_refused(saver: Checkpointer) -> None:
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="t")
    app.invoke(Command(resume="yes"), thread_id="t")
    everything, more = run(ins.history(saver, "t"))
    assert more is None and [cp.step for cp in everything] == sorted((cp.step for cp in everything), reverse=True)
    page, cursor = run(ins.history(saver, "t", limit=2))
    assert [cp.id for cp in page] == [cp.id for cp in everything[:2]] and cursor == page[-1].id
    rest, end = run(ins.history(saver, "t", limit=100, before=cursor))
    assert [cp.id for cp in rest] == [cp.id for cp in everything[2:]] and end is None
    with pytest.raises(CheckpointNotFoundError):
        run(ins.history(saver, "nope"))
    with pytest.raises(CheckpointNotFoundError):
        run(ins.get_checkpoint(saver, "t", "0" * 22))


def test_a_forks_root_changed_only_its_edits_against_the_checkpoint_it_came_from(saver: Checkpointer) -> None:
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="src")
    head = run(ins.get_checkpoint(saver, "src"))
    edited = app.fork("src", "edited", edits={"topic": "y"})
    d = run(ins.changes(saver, "edited", edited))
    assert d.a is not None and (d.a.thread_id, d.a.id) == ("src", head.id)
    assert [(c.key, c.kind, c.before, c.after) for c in d.channels] == [("topic", "changed", "x", "y")]
    assert run(ins.get_checkpoint(saver, "edited")).metadata["forked_from"] == {
        "thread_id": "src",
        "checkpoint_id": head.id,
    }
    plain = run(ins.copy_checkpoint(saver, "src", None, "plain"))
    d = run(ins.changes(saver, "plain", plain))
    assert d.a is not None and d.a.thread_id == "src" and d.channels == ()
    saver.delete_thread("src")  # the source gone: against an empty state, as any root
    d = run(ins.changes(saver, "edited", edited))
    assert d.a is None and "topic" in d.keys


def test_changes_report_appends_map_keys_and_messages_per_channel(saver: Checkpointer) -> None:
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="t")
    app.invoke(Command(resume="yes"), thread_id="t")
    hist, _ = run(ins.history(saver, "t"))
    research_cp = next(cp for cp in hist if "research" in (cp.metadata.get("writes") or {}))
    d = run(ins.changes(saver, "t", research_cp.id))
    by_key = {c.key: c for c in d.channels}
    assert by_key["notes"].kind == "list" and by_key["notes"].appended == ("on x",)
    assert by_key["sources"].kind == "map" and dict(by_key["sources"].added_keys) == {"web": 2}
    assert by_key["messages"].kind == "messages" and [m["id"] for m in by_key["messages"].appended] == ["m1"]
    root = hist[-1]
    assert run(ins.changes(saver, "t", root.id)).a is None
    head = run(ins.changes(saver, "t"))
    assert {c.key for c in head.channels} == {"answer", "messages"}
    assert next(c for c in head.channels if c.key == "answer").to_json() == {
        "key": "answer",
        "kind": "added",
        "after": "yes",
    }


def test_checkpoints_of_two_threads_diff_per_channel_and_threads_part_ways(saver: Checkpointer) -> None:
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="a")
    app.invoke({"topic": "y"}, thread_id="b")
    d = run(ins.diff_checkpoints(saver, ins.parse_ref("a"), ins.parse_ref("b")))
    topic = next(c for c in d.channels if c.key == "topic")
    assert (topic.kind, topic.before, topic.after) == ("changed", "x", "y")
    notes = next(c for c in d.channels if c.key == "notes")
    assert (notes.appended, notes.removed_items) == (("on y",), ("on x",))
    assert run(ins.diff_checkpoints(saver, ins.parse_ref("a"), ins.parse_ref("a"))).channels == ()
    parted = run(ins.diff_threads(saver, "a", "b"))
    assert parted.first_step == 0 and "topic" in parted.keys and parted.heads
    with pytest.raises(CheckpointNotFoundError):
        run(ins.diff_threads(saver, "a", "nope"))


def test_one_thread_diff_record_from_the_store_and_from_the_graph(saver: Checkpointer) -> None:
    """``plait.inspect.diff_threads`` and ``CompiledGraph.diff_threads`` give the same record,
    ``plait.ThreadDiff``: its sides are stored checkpoints from the first, states from the other."""
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="a")
    app.invoke({"topic": "y"}, thread_id="b")
    stored, shown = run(ins.diff_threads(saver, "a", "b")), app.diff_threads("a", "b")
    assert type(stored) is type(shown) is ThreadDiff is ins.ThreadDiff
    assert (stored.first_step, stored.keys, stored.heads) == (shown.first_step, shown.keys, shown.heads)
    assert isinstance(stored.head_a, Checkpoint) and isinstance(shown.head_a, ThreadState)
    assert stored.a is not None and shown.a is not None and stored.a.id == shown.a.checkpoint_id
    assert (stored.head_b.id, shown.head_b.checkpoint_id) == (app.get_state("b").checkpoint_id,) * 2


def test_a_copy_is_a_new_root_with_the_same_values_and_never_overwrites(saver: Checkpointer) -> None:
    app = build(saver)
    app.invoke({"topic": "x"}, thread_id="a")
    cid = run(ins.copy_checkpoint(saver, "a", None, "copy"))
    copied = run(ins.get_checkpoint(saver, "copy"))
    assert copied.id == cid and copied.parent_id is None and copied.metadata["source"] == "fork"
    assert dict(copied.values) == dict(run(ins.get_checkpoint(saver, "a")).values)
    assert [i.node for i in ins.waiting_interrupts(copied.pending_writes)] == ["ask"]
    with pytest.raises(ThreadExistsError):
        run(ins.copy_checkpoint(saver, "a", None, "copy"))


def test_refs_split_on_the_last_at_and_refuse_empty_parts() -> None:
    assert ins.parse_ref("t@c") == ins.CheckpointRef(thread_id="t", checkpoint_id="c")
    assert ins.parse_ref("me@host@c").thread_id == "me@host"
    assert ins.parse_ref("t").checkpoint_id is None
    for bad in ("", "@c", "t@"):
        with pytest.raises(ValueError):
            ins.parse_ref(bad)


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ([1, 2], [1, 2, 3], "list"),
        ([1, True], [1, 1], "list"),
        ({"a": 1}, {"a": 1.0}, "map"),
        ("x", 3, "changed"),
        ([], [{"id": "m", "c": 1}], "messages"),
    ],
)
def test_channel_diffs_tell_json_values_apart(before: Any, after: Any, kind: str) -> None:
    d = ins.diff_channel("k", before, after)
    assert d is not None and d.kind == kind
    assert ins.diff_channel("k", before, before) is None


def test_a_message_edited_in_place_is_an_update_not_an_append() -> None:
    d = ins.diff_channel("m", [{"id": "a", "c": 1}, {"id": "b", "c": 1}], [{"id": "a", "c": 2}, {"id": "c", "c": 1}])
    assert d is not None
    assert d.to_json() == {
        "key": "m",
        "kind": "messages",
        "appended": [{"id": "c", "c": 1}],
        "removed": [{"id": "b", "c": 1}],
        "updated": [{"before": {"id": "a", "c": 1}, "after": {"id": "a", "c": 2}}],
    }
