"""Migrations: a thread written by an older version of a graph is carried over to the graph's
version once, as one ``migrate`` checkpoint, when a run resumes it (every backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait import (
    START,
    AppendList,
    Checkpointer,
    Command,
    Graph,
    GraphChangedError,
    GraphError,
    GraphMigrationError,
    MemoryCheckpointer,
    Send,
    StateSchema,
    interrupt,
)
from plait.checkpoint.model import Checkpoint, Task
from plait.engine.migrating import carry_over
from plait.engine.spec import Lineage

Saver = Callable[..., Checkpointer]


def schema(channel: str = "topic") -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww(channel).build()


def asking(channel: str = "topic", node: str = "ask") -> Graph:
    """START -> pre -> ``node`` (asks, then writes ``channel`` + the answer)."""
    g = Graph(schema(channel)).add_node("pre", lambda s: {"log": ["pre"], channel: "t"})
    g.add_node(node, lambda s: {channel: s[channel] + ":" + interrupt("more?")})
    return g.add_edge(START, "pre").add_edge("pre", node)


def paused_v1(saver: Checkpointer, thread: str = "t") -> list[str]:
    """A thread of version 1 (written before versions) paused in ``ask``; its checkpoint ids."""
    asking().compile(saver).invoke({}, thread_id=thread)
    return [s.checkpoint_id for s in asking().compile(saver).get_state_history(thread)]


def rename_topic(values: dict[str, Any]) -> dict[str, Any]:
    values["subject"] = values.pop("topic")
    return values


def test_a_values_migration_carries_a_renamed_channel_over(make_saver: Saver) -> None:
    saver = make_saver()
    old_ids = paused_v1(saver)
    app = asking("subject").compile(saver, version=2, migrations={1: rename_topic})
    out = app.invoke(Command(resume="x"), thread_id="t")
    assert out == {"log": ["pre"], "subject": "t:x"}
    history = app.get_state_history("t")
    migrated = next(s for s in history if s.metadata["source"] == "migrate")
    assert migrated.values == {"log": ["pre"], "subject": "t"}
    assert (migrated.metadata["migrated_from"], migrated.metadata["migrated_to"]) == (1, 2)
    assert (migrated.metadata["graph_name"], migrated.metadata["graph_version"]) == ("Graph", 2)
    assert migrated.parent_id == old_ids[0]
    assert migrated.step == app.get_state("t", old_ids[0]).step
    assert set(old_ids) <= {s.checkpoint_id for s in history}  # the old checkpoints stay for time travel
    assert app.get_state("t", old_ids[0]).values["topic"] == "t"


def test_a_values_and_next_migration_renames_the_node_a_thread_is_paused_in(make_saver: Saver) -> None:
    saver = make_saver()
    paused_v1(saver)
    seen: list[list[Any]] = []

    def move(values: dict[str, Any], nxt: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        seen.append(list(nxt))
        return values, ["question" if n == "ask" else n for n in nxt]

    app = asking(node="question").compile(saver, version=2, migrations={1: move})
    state = app.get_state("t")
    assert state.next == ("ask",)  # reading migrates nothing
    assert app.invoke(None, thread_id="t")["__interrupt__"][0].node == "question"  # migrated, paused again
    migrated = app.get_state("t")
    assert migrated.metadata["source"] == "migrate" and migrated.next == ("question",)
    assert [i.node for i in migrated.interrupts] == ["question"]
    out = app.invoke(Command(resume="x"), thread_id="t")
    assert out == {"log": ["pre"], "topic": "t:x"}
    assert seen == [["ask"]]


def test_a_thread_paused_on_an_interrupt_shows_it_after_a_migration_and_answers_it(make_saver: Saver) -> None:
    saver = make_saver()
    paused_v1(saver)
    app = asking().compile(saver, version=2)
    # a resume with no answer migrates, then pauses again at the same question
    assert app.invoke(None, thread_id="t")["__interrupt__"][0].value == "more?"
    head = app.get_state("t")
    assert head.status == "interrupted" and head.metadata["graph_version"] == 2
    assert app.invoke(Command(resume="y"), thread_id="t")["topic"] == "t:y"


def fan_out(version: int | None, migrations: Any = None, saver: Checkpointer | None = None) -> Any:
    """START -> split -> Send(work, item) per item, paused before ``work``."""
    key = "n" if version is None else "num"
    g = Graph(StateSchema.builder().add("log", AppendList()).build())
    g.add_node("split", lambda s: {"log": ["split"]})
    g.add_node("work", lambda item: {"log": [f"w{item[key]}"]})
    g.add_edge(START, "split").add_conditional_edges(
        "split", lambda s: [Send("work", {"n": 1}), Send("work", {"n": 2})], ["work"]
    )
    return g.compile(saver, interrupt_before=["work"], version=version, migrations=migrations)


def test_a_pending_sends_argument_is_migrated_with_its_values(make_saver: Saver) -> None:
    saver = make_saver()
    fan_out(None, saver=saver).invoke({}, thread_id="t")

    def renumber(values: dict[str, Any], nxt: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        assert nxt == [Send("work", {"n": 1}), Send("work", {"n": 2})]
        values["log"] = [*values["log"], "migrated"]
        return values, [Send(s.node, {"num": s.arg["n"] * 10}) for s in nxt]

    app = fan_out(2, {1: renumber}, saver)
    out = app.invoke(None, thread_id="t")
    assert out["log"] == ["split", "migrated", "w10", "w20"]


def test_an_identity_step_still_runs_the_compatibility_check_and_says_how_to_migrate(make_saver: Saver) -> None:
    saver = make_saver()
    before = paused_v1(saver)
    app = asking(node="question").compile(saver, version=2)  # no migration for 1 -> 2
    with pytest.raises(GraphChangedError) as info:
        app.invoke(Command(resume="x"), thread_id="t")
    err = info.value
    assert (err.thread_version, err.graph_version, err.graph) == (1, 2, "Graph")
    assert "pending node 'ask' no longer exists" in str(err)
    assert "version 1 of the graph 'Graph'" in str(err) and "(version 2)" in str(err)
    assert "migrations={1: fn}" in str(err) and "fn(values, next)" in str(err)
    assert [s.checkpoint_id for s in app.get_state_history("t")] == before


def test_an_unversioned_graph_says_the_thread_and_the_graph_are_version_1(make_saver: Saver) -> None:
    saver = make_saver()
    paused_v1(saver)
    with pytest.raises(GraphChangedError, match=r"version 1 of the graph, .*\(version 1\)") as info:
        asking(node="question").compile(saver).invoke(Command(resume="x"), thread_id="t")
    assert "compile(version=2, migrations={1: fn})" in str(info.value)


def test_a_migration_that_raises_leaves_the_thread_unchanged(make_saver: Saver) -> None:
    saver = make_saver()
    before = paused_v1(saver)

    def broken(values: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no topic here")

    app = asking("subject").compile(saver, version=3, migrations={2: broken})
    with pytest.raises(GraphMigrationError) as info:
        app.invoke(Command(resume="x"), thread_id="t")
    err = info.value
    assert (err.thread_id, err.thread_version, err.graph_version, err.step) == ("t", 1, 3, 2)
    assert isinstance(err.__cause__, ValueError) and "no topic here" in str(err)
    assert [s.checkpoint_id for s in app.get_state_history("t")] == before
    assert app.get_state("t").status == "interrupted"
    fixed = asking("subject").compile(saver, version=3, migrations={2: rename_topic})
    assert fixed.invoke(Command(resume="x"), thread_id="t")["subject"] == "t:x"


def test_a_migration_returning_values_that_are_not_json_is_a_migration_error() -> None:
    saver = MemoryCheckpointer()
    paused_v1(saver)
    app = asking().compile(saver, version=2, migrations={1: lambda v: {**v, "topic": {1, 2}}})
    with pytest.raises(GraphMigrationError, match="NotSerializableError"):
        app.invoke(None, thread_id="t")


def test_a_chain_of_migrations_is_applied_once(make_saver: Saver) -> None:
    saver = make_saver()
    paused_v1(saver)
    calls: list[str] = []

    def one_two(values: dict[str, Any]) -> dict[str, Any]:
        calls.append("1->2")
        return rename_topic(values)

    def two_three(values: dict[str, Any]) -> dict[str, Any]:
        calls.append("2->3")
        return {**values, "log": [*values["log"], "v3"]}

    app = asking("subject").compile(saver, version=3, migrations={1: one_two, 2: two_three})
    assert app.invoke(None, thread_id="t")["log"] == ["pre", "v3"]  # pauses again
    assert app.invoke(Command(resume="x"), thread_id="t") == {"log": ["pre", "v3"], "subject": "t:x"}
    assert calls == ["1->2", "2->3"]
    sources = [s.metadata["source"] for s in app.get_state_history("t")]
    assert sources.count("migrate") == 1
    migrated = next(s for s in app.get_state_history("t") if s.metadata["source"] == "migrate")
    assert (migrated.metadata["migrated_from"], migrated.metadata["migrated_to"]) == (1, 3)


def test_a_thread_of_version_2_runs_only_the_later_migrations() -> None:
    saver = MemoryCheckpointer()
    asking("subject").compile(saver, version=2).invoke({}, thread_id="t")
    calls: list[int] = []

    def step(n: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def fn(values: dict[str, Any]) -> dict[str, Any]:
            calls.append(n)
            return values

        return fn

    app = asking("subject").compile(saver, version=3, migrations={1: step(1), 2: step(2)})
    app.invoke(Command(resume="x"), thread_id="t")
    assert calls == [2]


def test_a_graph_without_a_version_records_none() -> None:
    saver = MemoryCheckpointer()
    app = asking().compile(saver)
    app.invoke({}, thread_id="t")
    assert all("graph_version" not in s.metadata for s in app.get_state_history("t"))
    versioned = asking().compile(saver, name="asker", version=1)
    versioned.invoke({}, thread_id="u")
    assert all(
        (s.metadata["graph_name"], s.metadata["graph_version"]) == ("asker", 1)
        for s in versioned.get_state_history("u")
    )


def test_an_update_of_an_older_thread_keeps_its_version_so_the_next_run_migrates() -> None:
    saver = MemoryCheckpointer()
    paused_v1(saver)
    app = asking("subject").compile(saver, version=2, migrations={1: rename_topic})
    app.update_state("t", {"log": ["edited"]})
    assert app.get_state("t").metadata["graph_version"] == 1
    assert app.invoke(Command(resume="x"), thread_id="t") == {"log": ["pre", "edited"], "subject": "t:x"}


def test_a_migration_with_exit_durability_is_stored_with_the_run() -> None:
    saver = MemoryCheckpointer()
    paused_v1(saver)
    app = asking("subject").compile(saver, version=2, migrations={1: rename_topic})
    assert app.invoke(Command(resume="x"), thread_id="t", durability="exit")["subject"] == "t:x"
    assert app.invoke(None, thread_id="t")["subject"] == "t:x"  # the thread is current now


def test_compile_refuses_a_bad_version_or_migrations() -> None:
    with pytest.raises(GraphError, match="needs the graph's version"):
        asking().compile(migrations={1: rename_topic})
    with pytest.raises(GraphError, match="whole number from 1"):
        asking().compile(version=0)
    with pytest.raises(GraphError, match="from 1 to 1"):
        asking().compile(version=2, migrations={2: rename_topic})
    with pytest.raises(GraphError, match="is a function"):
        asking().compile(version=2, migrations={1: "rename"})  # type: ignore[dict-item]


def test_a_versioned_graph_keeps_the_unversioned_fingerprint() -> None:
    assert asking().compile(version=4).fingerprint == asking().compile().fingerprint


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=50, deadline=None)
@given(values=st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values), version=st.integers(2, 5))
def test_a_chain_of_identity_steps_leaves_the_values_and_tasks_equal(values: dict[str, Any], version: int) -> None:
    b = StateSchema.builder()
    for key in ("a", "b", "c"):
        b.add_lww(key)
    g = Graph(b.build()).add_node("n", lambda s: None).add_edge(START, "n")
    spec = g.compile(version=version).spec
    assert spec.lineage == Lineage(name="Graph", version=version)
    head = Checkpoint(
        thread_id="t",
        id="c1",
        parent_id=None,
        step=3,
        values=values,
        versions=dict.fromkeys(values, 2),
        next_tasks=(Task(id="x", node="n"),),
        metadata={"graph": "old", "reducers": dict.fromkeys("abc", "LastWriteWins")},
    )
    m = carry_over(spec, "new", head, head.metadata["reducers"])
    assert m is not None
    assert m.values == values and m.versions == head.versions and m.changed == frozenset()
    assert m.tasks == head.next_tasks and (m.from_version, m.to_version) == (1, version)


# -- ahead of time: CompiledGraph.migrate ----------------------------------------------------


def test_migrate_carries_every_thread_of_the_graph_over_and_skips_busy_ones(make_saver: Saver) -> None:
    saver = make_saver()
    paused_v1(saver, "paused")
    asking().compile(saver).invoke({}, thread_id="done")
    asking().compile(saver).invoke(Command(resume="z"), thread_id="done")  # finished
    paused_v1(saver, "busy")
    other = asking("subject").compile(saver, name="other", version=5)
    other.invoke({}, thread_id="another")  # another graph's (by the name it records)
    lease = asyncio.run(saver.atake_lease("busy", "a run"))
    app = asking("subject").compile(saver, version=2, migrations={1: rename_topic})

    planned = {r.thread_id: r.status for r in app.migrate(dry_run=True)}
    assert planned == {"paused": "would_migrate", "done": "would_migrate", "busy": "busy"}
    assert app.get_state("paused").metadata.get("graph_version") is None  # a dry run writes nothing

    heard: list[str] = []
    results = {r.thread_id: r for r in app.migrate(on_result=lambda r: heard.append(r.thread_id))}
    assert {t: r.status for t, r in results.items()} == {"paused": "migrated", "done": "migrated", "busy": "busy"}
    assert sorted(heard) == ["busy", "done", "paused"]
    assert results["done"].checkpoint_id == app.get_state("done").checkpoint_id
    assert app.get_state("done").values == {"log": ["pre"], "subject": "t:z"}
    assert app.get_state("done").status == "idle"
    paused = app.get_state("paused")
    assert paused.status == "interrupted" and paused.metadata["source"] == "migrate"
    assert app.invoke(Command(resume="x"), thread_id="paused")["subject"] == "t:x"
    assert [s.metadata["source"] for s in app.get_state_history("paused")].count("migrate") == 1
    assert sorted(r.status for r in app.migrate()) == ["busy", "current", "current"]
    asyncio.run(saver.arelease_lease(lease))
    assert app.migrate("busy")[0].status == "migrated"
    assert {r.status for r in app.migrate()} == {"current"}


def test_migrate_reports_a_failed_migration_and_goes_on() -> None:
    saver = MemoryCheckpointer()
    paused_v1(saver, "a")
    paused_v1(saver, "b")
    app = asking("subject").compile(saver, version=2, migrations={1: lambda v: {**v, "subject": v["nope"]}})
    results = app.migrate()
    assert {r.status for r in results} == {"failed"}
    assert all(isinstance(r.error, GraphMigrationError) and r.error.thread_id == r.thread_id for r in results)


def with_subgraph(node: str) -> Graph:
    """START -> ``node``: a subgraph that asks, then writes ``topic``."""
    inner = Graph(schema()).add_node("ask", lambda s: {"topic": interrupt("inner?")}).add_edge(START, "ask")
    return Graph(schema()).add_node(node, inner.compile()).add_edge(START, node)


def test_renaming_a_node_paused_inside_its_subgraph_is_refused_and_keeping_it_migrates(make_saver: Saver) -> None:
    saver = make_saver()
    with_subgraph("research").compile(saver).invoke({}, thread_id="t")
    before = [s.checkpoint_id for s in with_subgraph("research").compile(saver).get_state_history("t")]

    def move(values: dict[str, Any], nxt: list[Any]) -> tuple[dict[str, Any], list[Any]]:
        return values, ["study" for _ in nxt]

    renamed = with_subgraph("study").compile(saver, version=2, migrations={1: move})
    with pytest.raises(GraphChangedError, match="inside its subgraph") as info:
        renamed.invoke(Command(resume="x"), thread_id="t")
    assert (info.value.thread_version, info.value.graph_version) == (1, 2)
    assert [s.checkpoint_id for s in renamed.get_state_history("t")] == before
    kept = with_subgraph("research").compile(saver, version=2, migrations={1: lambda v: {**v, "log": ["v2"]}})
    assert kept.invoke(Command(resume="x"), thread_id="t") == {"log": ["v2"], "topic": "x"}


def test_a_renamed_channel_a_finished_siblings_saved_write_names_is_refused() -> None:
    saver = MemoryCheckpointer()

    def pair(channel: str) -> Graph:
        g = Graph(schema(channel)).add_node("a", lambda s: {channel: "t"})
        g.add_node("ask", lambda s: {"log": [interrupt("ok?")]})
        return g.add_edge(START, "a").add_edge(START, "ask")

    pair("topic").compile(saver).invoke({}, thread_id="t")  # "a" finished, "ask" waits: one step
    moved = {1: lambda v: {("subject" if k == "topic" else k): x for k, x in v.items()}}
    app = pair("subject").compile(saver, version=2, migrations=moved)
    with pytest.raises(GraphChangedError, match="saved a write to channel 'topic'"):
        app.invoke(Command(resume="x"), thread_id="t")
    assert pair("topic").compile(saver).invoke(Command(resume="x"), thread_id="t") == {"log": ["x"], "topic": "t"}
