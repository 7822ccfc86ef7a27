"""The workloads written for LangGraph, with its documented defaults.

Savers are built the way LangGraph's docs show: ``InMemorySaver()``,
``SqliteSaver.from_conn_string(path)`` / ``AsyncSqliteSaver.from_conn_string(path)`` and
``PostgresSaver.from_conn_string(dsn)`` / ``AsyncPostgresSaver.from_conn_string(dsn)``, each
followed by ``setup()`` before the clock starts. Nothing is tuned.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypedDict

from benchmarks._common import Env, new_thread, pg_total_bytes, sqlite_file_bytes, timed

NAME = "langgraph"
DEFAULT_DURABILITY = "async"
"""LangGraph's documented default (``Pregel.invoke``: durability defaults to "async")."""


def available() -> bool:
    """True when LangGraph and both of its savers import."""
    try:
        import langgraph.checkpoint.postgres
        import langgraph.checkpoint.sqlite
        import langgraph.graph  # noqa: F401
    except ImportError:
        return False
    return True


def import_all() -> None:
    """Import everything the workloads use, so later timings and RSS baselines exclude imports."""
    import langgraph.checkpoint.memory
    import langgraph.checkpoint.postgres
    import langgraph.checkpoint.postgres.aio
    import langgraph.checkpoint.sqlite
    import langgraph.checkpoint.sqlite.aio
    import langgraph.graph
    import langgraph.types  # noqa: F401


# --------------------------------------------------------------------------- states and graphs


class CounterState(TypedDict):
    n: int


class FanState(TypedDict):
    items: Annotated[list[int], operator.add]
    count: int


class ChatState(TypedDict):
    messages: Annotated[list[dict[str, str]], operator.add]


class ChainState(TypedDict):
    log: Annotated[list[str], operator.add]


def counter_graph(n: int) -> Any:
    """One node that increments ``n`` and loops to itself until ``n`` reaches the target."""
    from langgraph.graph import END, START, StateGraph

    b = StateGraph(CounterState)
    b.add_node("inc", lambda s: {"n": s["n"] + 1})
    b.add_edge(START, "inc")
    b.add_conditional_edges("inc", lambda s: "inc" if s["n"] < n else END)
    return b


def fan_graph(k: int, fanout: str, is_async: bool, joins: list[int]) -> Any:
    """``fan`` starts ``k`` workers (static edges or Send); each appends its index; ``join`` counts
    them (and counts its own calls in ``joins[0]``: it must run once per run)."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    b = StateGraph(FanState)
    if is_async:

        async def fan(s: FanState) -> dict[str, Any]:
            return {"count": 0}

        async def join(s: FanState) -> dict[str, Any]:
            joins[0] += 1
            return {"count": len(s["items"])}

        def make_worker(i: int) -> Any:
            async def work(s: Any) -> dict[str, Any]:
                return {"items": [i]}

            return work

        async def send_worker(arg: dict[str, int]) -> dict[str, Any]:
            return {"items": [arg["i"]]}

    else:

        def fan(s: FanState) -> dict[str, Any]:
            return {"count": 0}

        def join(s: FanState) -> dict[str, Any]:
            joins[0] += 1
            return {"count": len(s["items"])}

        def make_worker(i: int) -> Any:
            def work(s: Any) -> dict[str, Any]:
                return {"items": [i]}

            return work

        def send_worker(arg: dict[str, int]) -> dict[str, Any]:  # type: ignore[misc]
            return {"items": [arg["i"]]}

    b.add_node("fan", fan)
    b.add_node("join", join)
    b.add_edge(START, "fan")
    b.add_edge("join", END)
    if fanout == "static":
        for i in range(k):
            b.add_node(f"w{i}", make_worker(i))
            b.add_edge("fan", f"w{i}")
            b.add_edge(f"w{i}", "join")
    else:
        b.add_node("worker", send_worker)
        b.add_conditional_edges("fan", lambda s: [Send("worker", {"i": i}) for i in range(k)])
        b.add_edge("worker", "join")
    return b


def chat_graph(msgs: list[str]) -> Any:
    """Each step appends one message (a dict with ~1 KB of random text) until all are in."""
    from langgraph.graph import END, START, StateGraph

    n = len(msgs)
    b = StateGraph(ChatState)
    b.add_node(
        "say",
        lambda s: {"messages": [{"role": "user", "content": msgs[len(s["messages"])], "id": str(len(s["messages"]))}]},
    )
    b.add_edge(START, "say")
    b.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < n else END)
    return b


def chain_graph(calls: dict[str, int]) -> Any:
    """a -> b -> c; b fails on its first call only; ``calls`` counts every node call."""
    from langgraph.graph import END, START, StateGraph

    def node(name: str) -> Any:
        def run(s: ChainState) -> dict[str, Any]:
            calls[name] = calls.get(name, 0) + 1
            if name == "b" and calls[name] == 1:
                raise RuntimeError("b fails once")
            return {"log": [name]}

        return run

    b = StateGraph(ChainState)
    for name in ("a", "b", "c"):
        b.add_node(name, node(name))
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", "c")
    b.add_edge("c", END)
    return b


# --------------------------------------------------------------------------- savers


@contextlib.contextmanager
def saver(env: Env, backend: str, *, dsn: str | None = None, path: Any = None) -> Iterator[Any]:
    """A sync saver for ``backend``, set up before it is yielded."""
    if backend == "none":
        yield None
    elif backend == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif backend == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(str(path or env.sqlite_path("lg"))) as s:
            s.setup()
            yield s
    elif backend == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(dsn or env.pg_db(NAME)) as s:
            s.setup()
            yield s
    else:
        raise ValueError(backend)


@contextlib.asynccontextmanager
async def asaver(env: Env, backend: str, *, path: Any = None) -> AsyncIterator[Any]:
    """An async saver for ``backend``, set up before it is yielded."""
    if backend in ("none", "memory"):
        with saver(env, backend) as s:
            yield s
    elif backend == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(path or env.sqlite_path("lg"))) as s:
            await s.setup()
            yield s
    elif backend == "postgres":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(env.pg_db(NAME)) as s:
            await s.setup()
            yield s
    else:
        raise ValueError(backend)


def _cfg(thread: str, limit: int = 100, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf, "recursion_limit": limit}


def _dur(s: Any, durability: str | None) -> dict[str, Any]:
    return {} if s is None or durability is None else {"durability": durability}


# --------------------------------------------------------------------------- workloads


def w1(env: Env, backend: str, durability: str | None, n: int) -> float:
    """Seconds for one ``invoke`` of the ``n``-step counter loop."""
    with saver(env, backend) as s:
        app = counter_graph(n).compile(checkpointer=s)
        t, out = timed(app.invoke, {"n": 0}, _cfg(new_thread(), n + 10), **_dur(s, durability))
    assert out["n"] == n, out
    return t


def w2(env: Env, backend: str, fanout: str, nodes: str, k: int, runs: int, durability: str) -> list[float]:
    """Seconds per run of the fan-out graph, one run per new thread, after one warm-up run."""
    joins = [0]
    if nodes == "sync":
        with saver(env, backend) as s:
            app = fan_graph(k, fanout, False, joins).compile(checkpointer=s)
            samples = []
            for r in range(runs + 1):
                t, out = timed(app.invoke, {"items": [], "count": 0}, _cfg(new_thread()), **_dur(s, durability))
                assert out["count"] == k and joins[0] == r + 1, (out, joins)
                if r:
                    samples.append(t)
            return samples

    async def main() -> list[float]:
        async with asaver(env, backend) as s:
            app = fan_graph(k, fanout, True, joins).compile(checkpointer=s)
            loop = asyncio.get_running_loop()
            samples = []
            for r in range(runs + 1):
                t0 = loop.time()
                out = await app.ainvoke({"items": [], "count": 0}, _cfg(new_thread()), **_dur(s, durability))
                t = loop.time() - t0
                assert out["count"] == k and joins[0] == r + 1, (out, joins)
                if r:
                    samples.append(t)
            return samples

    return asyncio.run(main())


def w3(env: Env, backend: str, msgs: list[str]) -> tuple[int, int, float]:
    """Run a thread of ``len(msgs)`` steps; return (bytes after, bytes of the empty store, seconds)."""
    n = len(msgs)
    if backend == "sqlite":
        path = env.sqlite_path("lg-w3")
        with saver(env, backend, path=path) as s:
            empty = sqlite_file_bytes(path)
            app = chat_graph(msgs).compile(checkpointer=s)
            t, out = timed(app.invoke, {"messages": []}, _cfg(new_thread(), n + 10), durability="sync")
        size = sqlite_file_bytes(path)
    elif backend == "postgres":
        with env.fresh_pg("lg_w3") as dsn, saver(env, backend, dsn=dsn) as s:
            empty = pg_total_bytes(dsn)
            app = chat_graph(msgs).compile(checkpointer=s)
            t, out = timed(app.invoke, {"messages": []}, _cfg(new_thread(), n + 10), durability="sync")
            size = pg_total_bytes(dsn)
    else:
        raise ValueError(backend)
    assert len(out["messages"]) == n
    return size, empty, t


def w4(env: Env, backend: str, msgs: list[str], reps: int) -> dict[str, list[float]]:
    """Reads on a thread of ``len(msgs)`` steps: full history, latest state, a middle checkpoint;
    then the latest state and the middle checkpoint again through a new saver on the same file
    or database ("cold"), a new one for each repetition."""
    n = len(msgs)
    res: dict[str, list[float]] = {"history": [], "latest": [], "by_id": [], "latest_cold": [], "by_id_cold": []}
    path = env.sqlite_path("lg") if backend == "sqlite" else None
    dsn = env.pg_db(NAME) if backend == "postgres" else None
    with saver(env, backend, dsn=dsn, path=path) as s:
        app = chat_graph(msgs).compile(checkpointer=s)
        thread = new_thread()
        app.invoke({"messages": []}, _cfg(thread, n + 10), durability="sync")
        hist = list(app.get_state_history(_cfg(thread)))
        mid = hist[len(hist) // 2]
        mid_id = mid.config["configurable"]["checkpoint_id"]
        mid_len = len(mid.values["messages"])
        for _ in range(reps):
            t, hist = timed(lambda: list(app.get_state_history(_cfg(thread))))
            assert len(hist) >= n
            res["history"].append(t)
            t, st = timed(app.get_state, _cfg(thread))
            assert len(st.values["messages"]) == n
            res["latest"].append(t)
            t, st = timed(app.get_state, _cfg(thread, checkpoint_id=mid_id))
            assert len(st.values["messages"]) == mid_len
            res["by_id"].append(t)
        if backend in ("sqlite", "postgres"):
            other = new_thread()  # a thread the cold readers read first, untimed: the
            app.invoke({"messages": []}, _cfg(other, n + 10), durability="sync")
            for _ in range(reps):  # connection and statements are warm, the thread is not
                for op, cid, want in (("latest_cold", None, n), ("by_id_cold", mid_id, mid_len)):
                    with saver(env, backend, dsn=dsn, path=path) as cold:
                        reader = chat_graph(msgs).compile(checkpointer=cold)
                        reader.get_state(_cfg(other))
                        t, st = timed(reader.get_state, _cfg(thread, checkpoint_id=cid))
                        assert len(st.values["messages"]) == want
                        res[op].append(t)
    return res


def w5(env: Env, backend: str, reps: int) -> list[float]:
    """Seconds to resume a chain whose middle node failed once; the first node must not re-run."""
    samples = []
    with saver(env, backend) as s:
        for _ in range(reps):
            calls: dict[str, int] = {}
            app = chain_graph(calls).compile(checkpointer=s)
            cfg = _cfg(new_thread())
            with contextlib.suppress(RuntimeError):
                app.invoke({"log": []}, cfg, durability="sync")
            assert calls == {"a": 1, "b": 1}, calls
            t, out = timed(app.invoke, None, cfg, durability="sync")
            assert calls == {"a": 1, "b": 2, "c": 1}, calls
            assert out["log"] == ["a", "b", "c"], out
            samples.append(t)
    return samples


def w6(env: Env, backend: str, updates: int, reps: int) -> dict[str, list[float]]:
    """Seconds for ``updates`` update_state calls, and for forking at step 10 of 20 and continuing."""
    res: dict[str, list[float]] = {"update_state": [], "update_past": [], "fork_continue": []}
    with saver(env, backend) as s:
        app = counter_graph(20).compile(checkpointer=s)
        for _ in range(reps):
            thread = new_thread()
            app.invoke({"n": 0}, _cfg(thread), durability="sync")

            def many_updates(thread: str = thread) -> None:
                for i in range(updates):
                    app.update_state(_cfg(thread), {"n": i})

            t, _ = timed(many_updates)
            assert app.get_state(_cfg(thread)).values["n"] == updates - 1
            res["update_state"].append(t)

            past = next(h for h in app.get_state_history(_cfg(thread)) if h.values.get("n") == 10 and h.next)

            def past_updates(past: Any = past) -> None:
                for i in range(updates):
                    app.update_state(past.config, {"n": 1000 + i})

            t, _ = timed(past_updates)
            st = app.get_state(_cfg(thread))
            assert st.values["n"] == 1000 + updates - 1, st
            assert st.parent_config["configurable"]["checkpoint_id"] == past.config["configurable"]["checkpoint_id"]
            res["update_past"].append(t)

            thread = new_thread()
            app.invoke({"n": 0}, _cfg(thread), durability="sync")
            mid = next(h for h in app.get_state_history(_cfg(thread)) if h.values.get("n") == 10 and h.next)

            def fork_continue(mid: Any = mid) -> Any:
                cfg2 = app.update_state(mid.config, {"n": 10})
                return app.invoke(None, {**cfg2, "recursion_limit": 100}, durability="sync")

            t, out = timed(fork_continue)
            assert out["n"] == 20, out
            res["fork_continue"].append(t)
    return res


# --------------------------------------------------------------------------- W7 (child process)


async def w7_run(path: str, threads: int, steps: int, durability: str) -> float:
    """Seconds to run ``threads`` counter threads of ``steps`` steps at once on one SQLite file."""
    async with asaver(None, "sqlite", path=path) as s:  # type: ignore[arg-type]
        app = counter_graph(steps).compile(checkpointer=s)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        outs = await asyncio.gather(
            *(app.ainvoke({"n": 0}, _cfg(f"t{i}", steps + 10), durability=durability) for i in range(threads))
        )
        t = loop.time() - t0
        for thread in ("t0", f"t{threads - 1}"):  # what was returned is also what was stored
            assert (await app.aget_state(_cfg(thread))).values["n"] == steps
    assert all(o["n"] == steps for o in outs)
    return t
