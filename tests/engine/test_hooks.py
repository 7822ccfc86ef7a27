"""Run hooks: how a worker or a server steers a run without a store of its own kind. A stop
asked for at a step boundary ends the run ``stopped`` with every committed checkpoint kept and
nothing of the next step begun; the next run continues from there."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from plait import END, START, AppendList, Checkpointer, Graph
from plait.checkpoint.model import Checkpoint
from plait.engine.events import RunFinished
from plait.engine.options import RunHooks, RunResult


class S(TypedDict):
    log: Annotated[list[str], AppendList]


def _steps(ran: list[str], n: int = 4) -> Graph:
    g = Graph(S)
    names = [f"s{i}" for i in range(n)]

    def step(name: str) -> Callable[[Any], Any]:
        def run(s: Any) -> Any:
            ran.append(name)
            return {"log": [name]}

        return run

    for name in names:
        g.add_node(name, step(name))
    g.add_edge(START, names[0])
    for a, b in zip(names, names[1:], strict=False):
        g.add_edge(a, b)
    return g.add_edge(names[-1], END)


class StopAfter(RunHooks):
    """Stops the run at the boundary after ``steps`` boundaries; records what it saw."""

    def __init__(self, steps: int, modes: frozenset[str] = frozenset()) -> None:
        self.steps = steps
        self.modes = modes
        self.seen: list[int] = []
        self.items: list[tuple[str, Any]] = []
        self.result: RunResult | None = None

    def on_item(self, mode: str, item: Any) -> None:
        self.items.append((mode, item))

    async def at_step(self, checkpoint: Checkpoint) -> bool:
        self.seen.append(checkpoint.step)
        return len(self.seen) > self.steps

    def on_finish(self, result: RunResult) -> None:
        self.result = result


def test_a_stop_at_a_boundary_keeps_what_was_committed_and_the_next_run_goes_on(
    make_saver: Callable[..., Checkpointer],
) -> None:
    ran: list[str] = []
    saver = make_saver()
    app = _steps(ran).compile(checkpointer=saver)
    hooks = StopAfter(2)
    out = app.bind(hooks=hooks).invoke({"log": []}, thread_id="t")
    assert ran == ["s0", "s1"] and out["log"] == ["s0", "s1"]
    assert hooks.result is not None and hooks.result.status == "stopped"
    assert hooks.seen == [0, 1, 2]  # the input's checkpoint, then one per step
    state = app.get_state("t")
    assert state.status == "ready" and [t.node for t in state.tasks] == ["s2"]
    assert app.invoke(None, thread_id="t")["log"] == ["s0", "s1", "s2", "s3"]
    assert ran == ["s0", "s1", "s2", "s3"]  # nothing ran twice


def test_a_stop_in_exit_durability_stores_the_boundary_first(make_saver: Callable[..., Checkpointer]) -> None:
    ran: list[str] = []
    app = _steps(ran).compile(checkpointer=make_saver())
    app.bind(hooks=StopAfter(1)).invoke({"log": []}, thread_id="t", durability="exit")
    assert app.get_state("t").values["log"] == ["s0"]
    app.invoke(None, thread_id="t")
    assert ran == ["s0", "s1", "s2", "s3"]


def test_the_hooks_get_the_modes_they_ask_for_beside_the_callers_stream(
    make_saver: Callable[..., Checkpointer],
) -> None:
    app = _steps([], 2).compile(checkpointer=make_saver())
    hooks = StopAfter(99, frozenset({"updates", "events"}))
    streamed = list(app.bind(hooks=hooks).stream({"log": []}, thread_id="t", mode="values"))
    assert [v["log"] for v in streamed] == [[], ["s0"], ["s0", "s1"]]  # the caller's mode only
    assert {m for m, _ in hooks.items} == {"updates", "events"}
    assert [i for m, i in hooks.items if m == "updates"] == [{"s0": {"log": ["s0"]}}, {"s1": {"log": ["s1"]}}]
    finished = [i for m, i in hooks.items if isinstance(i, RunFinished)]
    assert [f.status for f in finished] == ["done"]
    assert hooks.result is not None and hooks.result.status == "done"


def test_a_breakpoint_ends_interrupted_as_the_hooks_see_it(make_saver: Callable[..., Checkpointer]) -> None:
    app = _steps([], 3).compile(checkpointer=make_saver(), interrupt_before=["s1"])
    hooks = StopAfter(99)
    out = app.bind(hooks=hooks).invoke({"log": []}, thread_id="t")
    assert "__interrupt__" not in out  # invoke's output does not tell a breakpoint from the end
    assert hooks.result is not None and hooks.result.status == "interrupted"


def test_hooks_steer_the_top_level_run_only(make_saver: Callable[..., Checkpointer]) -> None:
    inner = _steps([], 3)
    outer = Graph(S).add_node("sub", inner).add_node("after", lambda s: {"log": ["after"]})
    outer.add_edge(START, "sub").add_edge("sub", "after").add_edge("after", END)
    app = outer.compile(checkpointer=make_saver())
    hooks = StopAfter(99)
    out = app.bind(hooks=hooks).invoke({"log": []}, thread_id="t")
    assert out["log"] == ["s0", "s1", "s2", "after"]
    assert hooks.seen == [0, 1]  # before "sub" and before "after": none of the subgraph's three steps


def test_without_hooks_nothing_is_asked() -> None:
    hooks = RunHooks()
    assert asyncio.run(hooks.at_step(None)) is False  # type: ignore[arg-type]
    assert hooks.modes == frozenset()


class Nested(StopAfter):
    """Asks for its run's subgraphs' items too."""

    subgraphs = True

    def __init__(self, modes: frozenset[str]) -> None:
        super().__init__(99, modes)
        self.nested: list[tuple[tuple[str, ...], str, Any]] = []

    def on_subgraph_item(self, namespace: tuple[str, ...], mode: str, item: Any) -> None:
        self.nested.append((namespace, mode, item))


def test_hooks_that_ask_for_subgraphs_get_their_items_by_namespace_as_stream_yields_them(
    make_saver: Callable[..., Checkpointer],
) -> None:
    leaf = _steps([], 1)
    mid = Graph(S).add_node("deep", leaf).add_edge(START, "deep").add_edge("deep", END)
    outer = Graph(S).add_node("sub", mid).add_edge(START, "sub").add_edge("sub", END)
    app = outer.compile(checkpointer=make_saver())
    streamed = list(app.stream({"log": []}, thread_id="s", mode="updates", subgraphs=True))
    hooks = Nested(frozenset({"updates"}))
    plain = list(app.bind(hooks=hooks).stream({"log": []}, thread_id="t", mode="values"))
    assert [v["log"] for v in plain] == [[], ["s0"]]  # the caller's stream is its own
    assert [i for m, i in hooks.items] == [{"sub": {"log": ["s0"]}}]  # the run's own, as before
    got = [(tuple(p.split(":")[0] for p in ns), item) for ns, mode, item in hooks.nested]
    want = [(tuple(p.split(":")[0] for p in ns), item) for ns, item in streamed if ns]
    assert got == want == [(("sub", "deep"), {"s0": {"log": ["s0"]}}), (("sub",), {"deep": {"log": ["s0"]}})]
    assert all(mode == "updates" for _, mode, _ in hooks.nested)
    no_subgraphs = StopAfter(99, frozenset({"updates"}))
    app.bind(hooks=no_subgraphs).invoke({"log": []}, thread_id="u")
    assert [i for _, i in no_subgraphs.items] == [{"sub": {"log": ["s0"]}}]
