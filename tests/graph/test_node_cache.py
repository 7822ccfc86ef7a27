"""Node caching: ``add_node(..., cache_policy=CachePolicy(...))`` with ``compile(cache=...)``.

A node whose key is cached returns its stored writes without running, and the ``updates``
stream marks it as LangGraph does. Ported from LangGraph's own tests
(``test_in_one_fan_out_state_graph_waiting_edge_multiple``, with and without a cache), and run
on a MemoryCache and on the caches in the file store's folder and SQLite's and PostgreSQL's
databases."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from plait import (
    END,
    START,
    AppendList,
    AppendMessages,
    CacheKeyError,
    CachePolicy,
    Checkpointer,
    Command,
    FileCheckpointer,
    Graph,
    GraphError,
    MemoryCache,
    MemoryCheckpointer,
    MissingNodeError,
    NoCacheError,
    NodeError,
    NotSerializableError,
    PostgresCheckpointer,
    Send,
    SqliteCheckpointer,
    interrupt,
)
from plait.checkpoint.cache import NodeCache


class Clock:
    def __init__(self) -> None:
        self.now = 2_000_000.0

    def __call__(self) -> float:
        return self.now


Compile = Callable[[Graph], Any]


@pytest.fixture(params=["memory", "file", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Clock, Compile]]:
    """Compiles a graph with a checkpointer and a cache of one backend (the checkpointer's own
    on the file store, SQLite and PostgreSQL, a MemoryCache beside a memory checkpointer),
    sharing a clock."""
    clock = Clock()
    made: list[Checkpointer] = []

    def compile(g: Graph) -> Any:
        cp: Checkpointer
        if request.param == "memory":
            return g.compile(MemoryCheckpointer(clock=clock), cache=MemoryCache(clock=clock))
        if request.param == "file":
            cp = FileCheckpointer(tmp_path / "threads", clock=clock)
        elif request.param == "sqlite":
            cp = SqliteCheckpointer(tmp_path / "plait.db", clock=clock)
        else:
            dsn = request.getfixturevalue("postgres_dsn")
            cp = PostgresCheckpointer(dsn, schema=request.getfixturevalue("postgres_schema"), clock=clock)
        cp.setup()
        made.append(cp)
        return g.compile(cp, cache=True)

    yield clock, compile
    for cp in made:
        asyncio.run(cp.aclose())


# -- ported from LangGraph ---------------------------------------------------------------


def _sorted_add(x: list[str], y: list[str]) -> list[str]:
    return sorted([*x, *y])


class FanState(TypedDict, total=False):
    query: str
    answer: str
    docs: Annotated[list[str], _sorted_add]


@pytest.mark.parametrize("with_cache", [True, False])
def test_in_one_fan_out_state_graph_waiting_edge_multiple(with_cache: bool, backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    rewrite_query_count = 0

    def rewrite_query(data: FanState) -> FanState:
        nonlocal rewrite_query_count
        rewrite_query_count += 1
        return {"query": f"query: {data['query']}"}

    def decider_cond(data: FanState) -> str:
        return "qa" if data["query"].count("analyzed") > 1 else "rewrite_query"

    workflow = Graph(FanState)
    workflow.add_node("rewrite_query", rewrite_query, cache_policy=CachePolicy() if with_cache else None)
    workflow.add_node("analyzer_one", lambda data: {"query": f"analyzed: {data['query']}"})
    workflow.add_node("retriever_one", lambda data: {"docs": ["doc1", "doc2"]})
    workflow.add_node("retriever_two", lambda data: {"docs": ["doc3", "doc4"]})
    workflow.add_node("decider", lambda data: None)
    workflow.add_node("qa", lambda data: {"answer": ",".join(data["docs"])})
    workflow.add_edge(START, "rewrite_query")
    workflow.add_edge("rewrite_query", "analyzer_one")
    workflow.add_edge("analyzer_one", "retriever_one")
    workflow.add_edge("rewrite_query", "retriever_two")
    workflow.add_edge(["retriever_one", "retriever_two"], "decider")
    workflow.add_conditional_edges("decider", decider_cond)
    workflow.add_edge("qa", END)
    app = compile(workflow)

    expected = {
        "query": "analyzed: query: analyzed: query: what is weather in sf",
        "answer": "doc1,doc1,doc2,doc2,doc3,doc3,doc4,doc4",
        "docs": ["doc1", "doc1", "doc2", "doc2", "doc3", "doc3", "doc4", "doc4"],
    }
    assert app.invoke({"query": "what is weather in sf"}, thread_id="t1") == expected

    cached = {"__metadata__": {"cached": True}} if with_cache else {}
    # LangGraph's expected items; a node writing nothing shows {} in plait (None in LangGraph),
    # and tasks of one step arrive in the order they finish, so they are compared as a multiset.
    wanted: list[dict[str, Any]] = [
        {"rewrite_query": {"query": "query: what is weather in sf"}, **cached},
        {"analyzer_one": {"query": "analyzed: query: what is weather in sf"}},
        {"retriever_two": {"docs": ["doc3", "doc4"]}},
        {"retriever_one": {"docs": ["doc1", "doc2"]}},
        {"decider": {}},
        {"rewrite_query": {"query": "query: analyzed: query: what is weather in sf"}, **cached},
        {"analyzer_one": {"query": "analyzed: query: analyzed: query: what is weather in sf"}},
        {"retriever_two": {"docs": ["doc3", "doc4"]}},
        {"retriever_one": {"docs": ["doc1", "doc2"]}},
        {"decider": {}},
        {"qa": {"answer": "doc1,doc1,doc2,doc2,doc3,doc3,doc4,doc4"}},
    ]
    got = list(app.stream({"query": "what is weather in sf"}, thread_id="t2", mode="updates"))
    assert _bag(got) == _bag(wanted)
    assert [next(iter(i)) for i in got][0] == "rewrite_query" and got[-1] == wanted[-1]
    assert rewrite_query_count == (2 if with_cache else 4)

    if with_cache:
        app.clear_cache()
        assert app.invoke({"query": "what is weather in sf"}, thread_id="t3") == expected
        assert rewrite_query_count == 4


def _bag(items: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(i, sort_keys=True) for i in items)


# -- hits, keys, expiry --------------------------------------------------------------------


class S(TypedDict, total=False):
    x: int
    user: str
    y: int
    log: Annotated[list[Any], AppendList()]


def _counted(calls: list[Any], fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def node(state: Any) -> Any:
        calls.append(dict(state))
        return fn(state)

    return node


def _one(fn: Callable[[Any], Any], policy: CachePolicy | None = CachePolicy(), name: str = "double") -> Graph:
    return Graph(S).add_node(name, fn, cache_policy=policy).add_edge(START, name).add_edge(name, END)


def test_a_hit_returns_the_stored_writes_without_running_the_node(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    calls: list[Any] = []
    app = compile(_one(_counted(calls, lambda s: {"y": s["x"] * 2})))
    assert app.invoke({"x": 5}, thread_id="a") == {"x": 5, "y": 10, "log": []}
    assert list(app.stream({"x": 5}, thread_id="b", mode="updates")) == [
        {"double": {"y": 10}, "__metadata__": {"cached": True}}
    ]
    assert len(calls) == 1
    assert app.get_state("b").values == {"x": 5, "y": 10, "log": []}, (
        "a hit's writes are the step's, as the node's were"
    )
    timings = [(t[0], t[2]) for t in app.get_state("b").metadata["timings"]]
    assert timings == [("double", 0)], "0 attempts: the node was not called"
    assert [(t[0], t[2]) for t in app.get_state("a").metadata["timings"]] == [("double", 1)]
    assert app.invoke({"x": 6}, thread_id="c")["y"] == 12 and len(calls) == 2, "another input runs"


def test_an_entry_expires_after_its_ttl_by_the_stores_clock(backend: tuple[Clock, Compile]) -> None:
    clock, compile = backend
    calls: list[Any] = []
    app = compile(_one(_counted(calls, lambda s: {"y": s["x"]}), CachePolicy(ttl=60)))
    app.invoke({"x": 1}, thread_id="a")
    clock.now += 59
    app.invoke({"x": 1}, thread_id="b")
    assert len(calls) == 1
    clock.now += 2
    app.invoke({"x": 1}, thread_id="c")
    assert len(calls) == 2, "expired: the node runs again"
    app.invoke({"x": 1}, thread_id="d")
    assert len(calls) == 2, "and its new result is cached for another ttl"


def test_a_key_func_names_what_the_result_depends_on(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    calls: list[Any] = []
    app = compile(_one(_counted(calls, lambda s: {"y": len(s["user"])}), CachePolicy(key_func=lambda s: s["user"])))
    assert app.invoke({"user": "ann", "x": 1}, thread_id="a")["y"] == 3
    assert app.invoke({"user": "ann", "x": 2}, thread_id="b")["y"] == 3
    assert len(calls) == 1, "x is not part of the key"
    app.invoke({"user": "bob", "x": 1}, thread_id="c")
    assert len(calls) == 2


def test_clear_cache_clears_the_nodes_named(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    a_calls: list[Any] = []
    b_calls: list[Any] = []
    g = Graph(S)
    g.add_node("a", _counted(a_calls, lambda s: {"y": 1}), cache_policy=CachePolicy())
    g.add_node("b", _counted(b_calls, lambda s: {"log": ["b"]}), cache_policy=CachePolicy())
    g.add_node("plain", lambda s: None)
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", "plain").add_edge("plain", END)
    app = compile(g)
    app.invoke({"x": 1}, thread_id="1")
    app.invoke({"x": 1}, thread_id="2")
    assert (len(a_calls), len(b_calls)) == (1, 1)
    assert app.clear_cache(["a"]) == 1
    app.invoke({"x": 1}, thread_id="3")
    assert (len(a_calls), len(b_calls)) == (2, 1)
    assert asyncio.run(app.aclear_cache()) == 2
    app.invoke({"x": 1}, thread_id="4")
    assert (len(a_calls), len(b_calls)) == (3, 2)
    with pytest.raises(MissingNodeError):
        app.clear_cache(["nope"])


def test_clear_cache_without_a_cache_says_how_to_add_one() -> None:
    app = _one(lambda s: None).compile()
    with pytest.raises(NoCacheError, match="compile\\(cache=plait.MemoryCache\\(\\)\\)"):
        app.clear_cache()


def test_without_a_cache_a_policy_changes_nothing() -> None:
    calls: list[Any] = []
    app = _one(_counted(calls, lambda s: {"y": 1})).compile()
    app.invoke({"x": 1})
    app.invoke({"x": 1})
    assert len(calls) == 2


# -- what is never cached ------------------------------------------------------------------


def test_a_node_whose_writes_are_not_json_fails_and_nothing_is_cached(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    calls: list[Any] = []
    good = {"on": False}

    def node(s: Any) -> Any:
        calls.append(1)
        return {"y": 1} if good["on"] else {"log": [datetime.datetime(2026, 1, 1)]}

    app = compile(_one(node))
    with pytest.raises(NotSerializableError, match="datetime is not JSON data"):
        app.invoke({"x": 1}, thread_id="a")
    good["on"] = True
    app.invoke({"x": 1}, thread_id="b")
    assert len(calls) == 2, "the refused result was not cached: the node ran again"


def test_a_failed_node_is_not_cached(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    calls: list[Any] = []

    def flaky(s: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("down")
        return {"y": 1}

    app = compile(_one(flaky))
    with pytest.raises(NodeError):
        app.invoke({"x": 1}, thread_id="a")
    app.invoke({"x": 1}, thread_id="b")
    app.invoke({"x": 1}, thread_id="c")
    assert len(calls) == 2


def test_a_node_answered_by_a_human_is_not_cached(backend: tuple[Clock, Compile]) -> None:
    """Its result depends on the answer, not only on its input: a paused node is not stored,
    a resumed one neither looks the cache up nor stores."""
    _, compile = backend
    calls: list[Any] = []

    def ask(s: Any) -> Any:
        calls.append(1)
        return {"user": interrupt("who?")}

    app = compile(_one(ask))
    app.invoke({"x": 1}, thread_id="a")
    assert app.invoke(Command(resume="ann"), thread_id="a")["user"] == "ann"
    assert "__interrupt__" in app.invoke({"x": 1}, thread_id="b"), "asked again, not answered from the cache"
    assert app.invoke(Command(resume="bob"), thread_id="b")["user"] == "bob"
    assert len(calls) == 4


def test_a_key_that_cannot_be_made_fails_the_node(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    app = compile(_one(lambda s: {"y": 1}, CachePolicy(key_func=lambda s: 7)))  # type: ignore[arg-type,return-value]
    with pytest.raises(CacheKeyError, match="node 'double'.*returned int"):
        app.invoke({"x": 1}, thread_id="a")


# -- Send, Command, routers, messages ------------------------------------------------------


def test_each_send_is_cached_by_its_own_argument(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    calls: list[Any] = []
    g = Graph(S)
    g.add_node("fan", lambda s: None)
    g.add_node("work", _counted(calls, lambda arg: {"log": [arg["n"] * 10]}), cache_policy=CachePolicy())
    g.add_edge(START, "fan")
    g.add_conditional_edges("fan", lambda s: [Send("work", {"n": n}) for n in range(s["x"])])
    g.add_edge("work", END)
    app = compile(g)
    assert sorted(app.invoke({"x": 3}, thread_id="a")["log"]) == [0, 10, 20]
    assert sorted(app.invoke({"x": 4}, thread_id="b")["log"]) == [0, 10, 20, 30]
    assert sorted(c["n"] for c in calls) == [0, 1, 2, 3], "only the new argument ran"


def test_a_cached_command_still_routes(backend: tuple[Clock, Compile]) -> None:
    _, compile = backend
    calls: list[Any] = []
    g = Graph(S)
    g.add_node(
        "pick",
        _counted(calls, lambda s: Command(update={"y": 1}, goto=[Send("b", {"n": 2}), "a"])),
        cache_policy=CachePolicy(),
        destinations=["a", "b"],
    )
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("b", lambda arg: {"log": [f"b{arg['n']}"]})
    g.add_edge(START, "pick").add_edge("a", END).add_edge("b", END)
    app = compile(g)
    first = app.invoke({"x": 1}, thread_id="1")
    second = app.invoke({"x": 1}, thread_id="2")
    assert sorted(first["log"]) == sorted(second["log"]) == ["a", "b2"] and second["y"] == 1
    assert len(calls) == 1


def test_routers_run_again_on_a_hit() -> None:
    """Routers belong to the graph, not to the node: they route a hit on the state as it is."""
    calls: list[Any] = []
    g = Graph(S)
    g.add_node("n", _counted(calls, lambda s: {"y": 1}), cache_policy=CachePolicy(key_func=lambda s: "same"))
    g.add_node("small", lambda s: {"log": ["small"]})
    g.add_node("big", lambda s: {"log": ["big"]})
    g.add_edge(START, "n").add_edge("small", END).add_edge("big", END)
    g.add_conditional_edges("n", lambda s: "big" if s["x"] > 5 else "small")
    app = g.compile(cache=MemoryCache())
    assert app.invoke({"x": 1})["log"] == ["small"]
    assert app.invoke({"x": 9})["log"] == ["big"]
    assert len(calls) == 1


class Chat(TypedDict, total=False):
    messages: Annotated[list[Any], AppendMessages()]
    turn: int


def test_a_hits_messages_get_ids_of_their_own() -> None:
    """A cached reply used twice in one thread is two messages, not one replaced."""
    app = (
        Graph(Chat)
        .add_node(
            "hello",
            lambda s: {"messages": [{"role": "ai", "content": "hi"}]},
            cache_policy=CachePolicy(key_func=lambda s: "hello"),
        )
        .add_edge(START, "hello")
        .compile(MemoryCheckpointer(), cache=MemoryCache())
    )
    app.invoke({"turn": 1}, thread_id="t")
    out = app.invoke({"turn": 2}, thread_id="t")
    assert [m["content"] for m in out["messages"]] == ["hi", "hi"]
    assert len({m["id"] for m in out["messages"]}) == 2


# -- subgraphs -----------------------------------------------------------------------------


def test_a_subgraph_node_takes_no_cache_policy_its_nodes_do() -> None:
    calls: list[Any] = []
    inner = Graph(S).add_node("inner", _counted(calls, lambda s: {"y": s["x"] + 1}), cache_policy=CachePolicy())
    inner.add_edge(START, "inner").add_edge("inner", END)
    with pytest.raises(GraphError, match="is a subgraph.*give its nodes a cache_policy"):
        Graph(S).add_node("sub", inner.compile(), cache_policy=CachePolicy())
    outer = Graph(S).add_node("sub", inner.compile()).add_edge(START, "sub").add_edge("sub", END)
    app = outer.compile(MemoryCheckpointer(), cache=MemoryCache())
    assert app.invoke({"x": 1}, thread_id="a")["y"] == 2
    assert app.invoke({"x": 1}, thread_id="b")["y"] == 2
    assert len(calls) == 1, "the subgraph's node used the cache of the graph running it"
    assert app.clear_cache() == 1, "clear_cache() clears its subgraphs' nodes too"


def test_a_policy_must_be_a_cache_policy() -> None:
    with pytest.raises(GraphError, match="not a plait.CachePolicy"):
        Graph(S).add_node("n", lambda s: None, cache_policy={"ttl": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="plait.MemoryCache"):
        _one(lambda s: None).compile(cache="memory")  # type: ignore[arg-type]


# -- the checkpointer's cache across processes -----------------------------------------------


def test_the_cache_is_shared_by_a_new_checkpointer_of_the_database(tmp_path: Path) -> None:
    calls: list[Any] = []
    g = _one(_counted(calls, lambda s: {"y": s["x"] * 2}))
    with SqliteCheckpointer(tmp_path / "a.db") as cp:
        g.compile(cp, cache=cp.cache).invoke({"x": 2}, thread_id="a")
    with SqliteCheckpointer(tmp_path / "a.db") as cp:  # a new connection, as a new process has
        app = g.compile(cp, cache=True)
        assert list(app.stream({"x": 2}, thread_id="b", mode="updates")) == [
            {"double": {"y": 4}, "__metadata__": {"cached": True}}
        ]
        assert len(calls) == 1
        assert app.clear_cache() == 1


def test_the_cache_survives_the_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import uuid
        from typing import TypedDict
        import plait

        class S(TypedDict, total=False):
            x: int
            y: int

        def double(s):
            print("ran")
            return {{"y": s["x"] * 2}}

        g = plait.Graph(S).add_node("double", double, cache_policy=plait.CachePolicy())
        g.add_edge(plait.START, "double")
        with plait.SqliteCheckpointer({str(tmp_path / "p.db")!r}) as cp:
            app = g.compile(cp, cache=True)
            for item in app.stream({{"x": 21}}, thread_id=uuid.uuid4().hex, mode="updates"):
                print(item)
        """
    )

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
        return done.stdout

    first, second = run(), run()
    assert first.splitlines() == ["ran", "{'double': {'y': 42}}"]
    assert second.splitlines() == ["{'double': {'y': 42}, '__metadata__': {'cached': True}}"]


def test_bind_moves_the_checkpointers_cache_with_it(tmp_path: Path) -> None:
    with SqliteCheckpointer(tmp_path / "a.db") as one, SqliteCheckpointer(tmp_path / "b.db") as two:
        app = _one(lambda s: {"y": 1}).compile(one, cache=True)
        assert app.binding.cache == one.cache
        assert app.bind(checkpointer=two).binding.cache == two.cache
        mine: NodeCache = MemoryCache()
        kept = _one(lambda s: {"y": 1}).compile(one, cache=mine).bind(checkpointer=two)
        assert kept.binding.cache is mine, "a cache of its own stays"


def test_a_model_states_key_is_its_json_form() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Model(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        x: int = 0
        y: int = 0

    calls: list[Any] = []

    def node(s: Any) -> Any:
        calls.append(s.x)
        return {"y": s.x * 2}

    app = Graph(Model).add_node("n", node, cache_policy=CachePolicy()).add_edge(START, "n").compile(cache=MemoryCache())
    assert app.invoke({"x": 3}) == app.invoke({"x": 3}) == {"x": 3, "y": 6}
    assert app.invoke({"x": 4})["y"] == 8
    assert calls == [3, 4]


def test_the_async_api_is_the_same_cache(tmp_path: Path) -> None:
    calls: list[Any] = []

    async def node(s: Any) -> Any:
        calls.append(1)
        return {"y": s["x"]}

    async def go() -> None:
        cp = SqliteCheckpointer(tmp_path / "a.db")
        app = _one(node).compile(cp, cache=True)
        await app.ainvoke({"x": 1}, thread_id="a")
        items = [i async for i in app.astream({"x": 1}, thread_id="b", mode="updates")]
        assert items == [{"double": {"y": 1}, "__metadata__": {"cached": True}}]
        assert await app.aclear_cache() == 1
        await app.ainvoke({"x": 1}, thread_id="c")
        await cp.aclose()

    asyncio.run(go())
    assert len(calls) == 2


def test_a_dag_step_takes_a_cache_policy() -> None:
    from plait import Dag

    calls: list[Any] = []
    dag = Dag(S).step("a", _counted(calls, lambda s: {"y": s["x"] + 1}), cache_policy=CachePolicy())
    app = dag.step("b", lambda s: {"log": [s["y"]]}).edge("a", "b").compile(cache=MemoryCache())
    assert app.invoke({"x": 1})["log"] == app.invoke({"x": 1})["log"] == [2]
    assert len(calls) == 1


@dataclasses.dataclass
class Job:
    n: int


def test_a_send_of_a_dataclass_is_keyed_by_its_json_form() -> None:
    calls: list[int] = []

    def work(job: Job) -> Any:
        calls.append(job.n)
        return {"log": [job.n * 10]}

    g = Graph(S)
    g.add_node("fan", lambda s: None)
    g.add_node("work", work, cache_policy=CachePolicy())
    g.add_edge(START, "fan").add_edge("work", END)
    g.add_conditional_edges("fan", lambda s: [Send("work", Job(n=n)) for n in range(s["x"])])
    app = g.compile(cache=MemoryCache())
    assert sorted(app.invoke({"x": 2})["log"]) == sorted(app.invoke({"x": 2})["log"]) == [0, 10]
    assert sorted(calls) == [0, 1]


def test_a_cached_command_may_send_a_dataclass() -> None:
    calls: list[Any] = []
    g = Graph(S)
    g.add_node(
        "pick",
        _counted(calls, lambda s: Command(goto=[Send("work", Job(n=s["x"]))])),
        cache_policy=CachePolicy(),
        destinations=["work"],
    )

    def work(job: Job) -> Any:
        return {"log": [job.n]}

    g.add_node("work", work)
    g.add_edge(START, "pick").add_edge("work", END)
    app = g.compile(cache=MemoryCache())
    assert app.invoke({"x": 7})["log"] == app.invoke({"x": 7})["log"] == [7]
    assert len(calls) == 1
