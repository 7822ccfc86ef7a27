"""plan_next: which tasks the next super-step runs. A pure function, tested directly on the
GraphSpec that ``Graph(...).spec()`` freezes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait import END, START, AppendList, Graph, StateSchema
from plait.checkpoint.model import Task
from plait.engine.plan import Route, plan_next, task_id
from plait.engine.spec import GraphSpec


def _noop(state: Any) -> Any:
    return None


def spec() -> GraphSpec:
    """START -> a, b; a -> c; b -> c; join [a, b] -> j; c -> END; w is a Send target."""
    schema = StateSchema.builder().add("log", AppendList()).build()
    g = Graph(schema)
    for name in ("a", "b", "c", "j", "w"):
        g.add_node(name, _noop)
    g.add_edge(START, "a").add_edge(START, "b")
    g.add_edge("a", "c").add_edge("b", "c").add_edge("c", END)
    g.add_edge(["a", "b"], "j")
    g.add_edge(START, "w")
    return g.spec()


def finished(*items: tuple[str, Sequence[Route]]) -> list[tuple[Task, Sequence[Route]]]:
    return [(Task(id=f"t-{node}-{i}", node=node), list(routes)) for i, (node, routes) in enumerate(items)]


def test_plain_triggers_of_one_node_collapse_into_one_task_in_first_triggered_order() -> None:
    tasks, _ = plan_next(spec(), "cp1", finished(("a", ["c", "w"]), ("b", ["w", "c"])), {})
    assert [t.node for t in tasks if t.node != "j"] == ["c", "w"]
    assert sum(1 for t in tasks if t.node == "c") == 1
    assert all(not t.send for t in tasks)


def test_end_is_not_a_task() -> None:
    tasks, _ = plan_next(spec(), "cp1", finished(("c", [END])), {})
    assert tasks == ()


def test_every_send_is_its_own_task_after_the_plain_ones_with_its_arg() -> None:
    routes: list[Route] = [("w", 1), "c", ("w", {"n": 2}), ("w", 1)]
    tasks, _ = plan_next(spec(), "cp1", finished(("c", routes)), {})
    assert [(t.node, t.send, t.arg) for t in tasks] == [
        ("c", False, None),
        ("w", True, 1),
        ("w", True, {"n": 2}),
        ("w", True, 1),
    ]
    assert len({t.id for t in tasks}) == 4, "equal Sends are still separate tasks with separate ids"


def test_a_join_waits_for_all_its_sources_and_then_resets() -> None:
    s = spec()
    join_id = s.joins[0].id
    tasks, barriers = plan_next(s, "cp1", finished(("a", [])), {})
    assert tasks == ()
    assert barriers == {join_id: ("a",)}

    tasks, barriers = plan_next(s, "cp2", finished(("b", [])), barriers)
    assert [t.node for t in tasks] == ["j"]
    assert barriers == {}, "the barrier resets once the join fired"

    # the next round needs both again
    tasks, barriers = plan_next(s, "cp3", finished(("b", [])), barriers)
    assert tasks == ()
    assert barriers == {join_id: ("b",)}


def test_a_join_whose_sources_finish_in_one_step_fires_in_the_next() -> None:
    s = spec()
    tasks, barriers = plan_next(s, "cp1", finished(("a", ["c"]), ("b", ["c"])), {})
    assert [t.node for t in tasks] == ["c", "j"]
    assert barriers == {}


def test_plan_next_does_not_mutate_the_barriers_it_is_given() -> None:
    s = spec()
    before = {s.joins[0].id: ("a",)}
    snapshot = dict(before)
    plan_next(s, "cp1", finished(("b", [])), before)
    assert before == snapshot


def test_task_ids_are_deterministic_for_the_same_inputs() -> None:
    s = spec()
    routes: list[Route] = ["c", ("w", 1), ("w", 2)]
    one, _ = plan_next(s, "cp1", finished(("a", routes)), {})
    two, _ = plan_next(s, "cp1", finished(("a", routes)), {})
    assert one == two
    assert [t.id for t in one] == [task_id("cp1", "c", 0), task_id("cp1", "w", 1), task_id("cp1", "w", 2)]
    other, _ = plan_next(s, "cp2", finished(("a", routes)), {})
    assert {t.id for t in other}.isdisjoint({t.id for t in one}), "another checkpoint gives other ids"


def test_sends_to_several_nodes_get_the_ids_task_id_gives() -> None:
    routes: list[Route] = [("w", 1), ("c", 2), ("w", 3), "a", ("c", 4)]
    tasks, _ = plan_next(spec(), "cp9", finished(("a", routes)), {})
    sends = [t for t in tasks if t.send]
    assert [(t.node, t.id) for t in sends] == [
        ("w", task_id("cp9", "w", 1)),
        ("c", task_id("cp9", "c", 2)),
        ("w", task_id("cp9", "w", 3)),
        ("c", task_id("cp9", "c", 4)),
    ]


def test_task_ids_do_not_change_between_versions() -> None:
    """Ids are stored (pending writes are keyed by them): the same inputs must give the same
    ids in every plait release."""
    assert task_id("cp1", "c", 0) == "1516f3a65a8cb8f8"
    tasks, _ = plan_next(spec(), "cp1", finished(("a", [("w", 1)])), {})
    assert tasks[0].id == "1c75b55683d8ad49"
