"""The workloads written for plait, with the same semantics as ``benchmarks.lg``.

Checkpointers are plait's own: ``MemoryCheckpointer()``, ``SqliteCheckpointer(path)`` and
``PostgresCheckpointer(dsn)``, with their defaults (SQLite commits are fsync'd: WAL,
synchronous=FULL).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

from benchmarks._common import Env, new_thread, pg_total_bytes, sqlite_file_bytes, timed

NAME = "plait"
DEFAULT_DURABILITY = "sync"
"""plait's documented default; :func:`import_all` reads it from ``CompiledGraph.invoke``."""


def available() -> bool:
    """True when plait's graph API is importable; a missing backend fails only its own cases."""
    try:
        import plait
    except ImportError:
        return False
    return hasattr(plait, "Graph")


def import_all() -> None:
    """Import everything the workloads use and read plait's default durability."""
    global DEFAULT_DURABILITY
    import plait

    app = plait.Graph(plait.StateSchema.builder().add_lww("n").build())
    app.add_node("x", lambda s: None).add_edge(plait.START, "x")
    default = inspect.signature(app.compile().invoke).parameters.get("durability")
    if default is not None and isinstance(default.default, str):
        DEFAULT_DURABILITY = default.default
    with contextlib.suppress(ImportError):
        import psycopg  # noqa: F401


# --------------------------------------------------------------------------- graphs


def counter_graph(n: int) -> Any:
    """One node that increments ``n`` and loops to itself until ``n`` reaches the target."""
    from plait import END, START, Graph, StateSchema

    g = Graph(StateSchema.builder().add_lww("n").build())
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_conditional_edges("inc", lambda s: "inc" if s["n"] < n else END)
    return g


def fan_graph(k: int, fanout: str, is_async: bool, joins: list[int]) -> Any:
    """``fan`` starts ``k`` workers (static edges or Send); each appends its index; ``join`` counts
    them (and counts its own calls in ``joins[0]``: it must run once per run)."""
    from plait import END, START, AppendList, Graph, Send, StateSchema

    g = Graph(StateSchema.builder().add("items", AppendList()).add_lww("count").build())
    if is_async:

        async def fan(s: Any) -> dict[str, Any]:
            return {"count": 0}

        async def join(s: Any) -> dict[str, Any]:
            joins[0] += 1
            return {"count": len(s["items"])}

        def make_worker(i: int) -> Any:
            async def work(s: Any) -> dict[str, Any]:
                return {"items": [i]}

            return work

        async def send_worker(arg: dict[str, int]) -> dict[str, Any]:
            return {"items": [arg["i"]]}

    else:

        def fan(s: Any) -> dict[str, Any]:
            return {"count": 0}

        def join(s: Any) -> dict[str, Any]:
            joins[0] += 1
            return {"count": len(s["items"])}

        def make_worker(i: int) -> Any:
            def work(s: Any) -> dict[str, Any]:
                return {"items": [i]}

            return work

        def send_worker(arg: dict[str, int]) -> dict[str, Any]:  # type: ignore[misc]
            return {"items": [arg["i"]]}

    g.add_node("fan", fan)
    g.add_node("join", join)
    g.add_edge(START, "fan")
    g.add_edge("join", END)
    if fanout == "static":
        for i in range(k):
            g.add_node(f"w{i}", make_worker(i))
            g.add_edge("fan", f"w{i}")
            g.add_edge(f"w{i}", "join")
    else:
        g.add_node("worker", send_worker)
        g.add_conditional_edges("fan", lambda s: [Send("worker", {"i": i}) for i in range(k)])
        g.add_edge("worker", "join")
    return g


def chat_graph(msgs: list[str]) -> Any:
    """Each step appends one message (a dict with ~1 KB of random text) until all are in."""
    from plait import END, START, AppendList, Graph, StateSchema

    n = len(msgs)
    g = Graph(StateSchema.builder().add("messages", AppendList()).build())
    g.add_node(
        "say",
        lambda s: {"messages": [{"role": "user", "content": msgs[len(s["messages"])], "id": str(len(s["messages"]))}]},
    )
    g.add_edge(START, "say")
    g.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < n else END)
    return g


def chain_graph(calls: dict[str, int]) -> Any:
    """a -> b -> c; b fails on its first call only; ``calls`` counts every node call."""
    from plait import END, START, AppendList, Graph, StateSchema

    def node(name: str) -> Any:
        def run(s: Any) -> dict[str, Any]:
            calls[name] = calls.get(name, 0) + 1
            if name == "b" and calls[name] == 1:
                raise RuntimeError("b fails once")
            return {"log": [name]}

        return run

    g = Graph(StateSchema.builder().add("log", AppendList()).build())
    for name in ("a", "b", "c"):
        g.add_node(name, node(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g


# --------------------------------------------------------------------------- checkpointers


def _make(env: Env | None, backend: str, dsn: str | None, path: Any) -> Any:
    import plait

    if backend == "none":
        return None
    if backend == "memory":
        return plait.MemoryCheckpointer()
    if backend == "sqlite":
        assert path is not None or env is not None
        return plait.SqliteCheckpointer(str(path or env.sqlite_path("plait")))  # type: ignore[union-attr]
    if backend == "postgres":
        assert dsn is not None or env is not None
        return plait.PostgresCheckpointer(dsn or env.pg_db(NAME))  # type: ignore[union-attr]
    raise ValueError(backend)


@contextlib.contextmanager
def saver(env: Env | None, backend: str, *, dsn: str | None = None, path: Any = None) -> Iterator[Any]:
    """A checkpointer for the sync API, set up before it is yielded.

    The sync API runs plait's async core on one event loop per thread; setup and close go
    through the same loop (``plait._sync.run_sync``), as the sync facade itself does.
    """
    from plait._sync import run_sync

    cp = _make(env, backend, dsn, path)
    try:
        if cp is not None:
            run_sync(cp.asetup())
        yield cp
    finally:
        if cp is not None and hasattr(cp, "close"):
            cp.close()
        elif cp is not None:
            run_sync(cp.aclose())


@contextlib.asynccontextmanager
async def asaver(env: Env | None, backend: str, *, path: Any = None) -> AsyncIterator[Any]:
    """A checkpointer for the async API, set up before it is yielded."""
    cp = _make(env, backend, None, path)
    try:
        if cp is not None:
            await cp.asetup()
        yield cp
    finally:
        if cp is not None:
            await cp.aclose()


def _dur(cp: Any, durability: str | None) -> dict[str, Any]:
    return {} if cp is None or durability is None else {"durability": durability}


# --------------------------------------------------------------------------- workloads


def w1(env: Env, backend: str, durability: str | None, n: int) -> float:
    """Seconds for one ``invoke`` of the ``n``-step counter loop."""
    with saver(env, backend) as cp:
        app = counter_graph(n).compile(checkpointer=cp)
        t, out = timed(app.invoke, {"n": 0}, thread_id=new_thread(), recursion_limit=n + 10, **_dur(cp, durability))
    assert out["n"] == n, out
    return t


def w2(env: Env, backend: str, fanout: str, nodes: str, k: int, runs: int, durability: str) -> list[float]:
    """Seconds per run of the fan-out graph, one run per new thread, after one warm-up run."""
    joins = [0]
    if nodes == "sync":
        with saver(env, backend) as cp:
            app = fan_graph(k, fanout, False, joins).compile(checkpointer=cp)
            samples = []
            for r in range(runs + 1):
                t, out = timed(app.invoke, {"items": [], "count": 0}, thread_id=new_thread(), **_dur(cp, durability))
                assert out["count"] == k and joins[0] == r + 1, (out, joins)
                if r:
                    samples.append(t)
            return samples

    async def main() -> list[float]:
        async with asaver(env, backend) as cp:
            app = fan_graph(k, fanout, True, joins).compile(checkpointer=cp)
            loop = asyncio.get_running_loop()
            samples = []
            for r in range(runs + 1):
                t0 = loop.time()
                out = await app.ainvoke({"items": [], "count": 0}, thread_id=new_thread(), **_dur(cp, durability))
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
        path = env.sqlite_path("plait-w3")
        with saver(env, backend, path=path) as cp:
            app = chat_graph(msgs).compile(checkpointer=cp)
            empty = sqlite_file_bytes(path)
            t, out = timed(
                app.invoke, {"messages": []}, thread_id=new_thread(), recursion_limit=n + 10, durability="sync"
            )
        size = sqlite_file_bytes(path)
    elif backend == "postgres":
        with env.fresh_pg("plait_w3") as dsn, saver(env, backend, dsn=dsn) as cp:
            app = chat_graph(msgs).compile(checkpointer=cp)
            empty = pg_total_bytes(dsn)
            t, out = timed(
                app.invoke, {"messages": []}, thread_id=new_thread(), recursion_limit=n + 10, durability="sync"
            )
            size = pg_total_bytes(dsn)
    else:
        raise ValueError(backend)
    assert len(out["messages"]) == n
    return size, empty, t


def _cid(snapshot: Any) -> str:
    cid = getattr(snapshot, "checkpoint_id", None)
    if cid is None:
        cid = snapshot.config["configurable"]["checkpoint_id"]
    return str(cid)


def w4(env: Env, backend: str, msgs: list[str], reps: int) -> dict[str, list[float]]:
    """Reads on a thread of ``len(msgs)`` steps: full history, latest state, a middle checkpoint;
    then the latest state and the middle checkpoint again through a new checkpointer on the
    same file or database ("cold": a reader that did not write the thread, as a server, a
    restarted process or the Studio is), a new one for each repetition."""
    n = len(msgs)
    res: dict[str, list[float]] = {"history": [], "latest": [], "by_id": [], "latest_cold": [], "by_id_cold": []}
    path = env.sqlite_path("plait") if backend == "sqlite" else None
    dsn = env.pg_db(NAME) if backend == "postgres" else None
    with saver(env, backend, dsn=dsn, path=path) as cp:
        app = chat_graph(msgs).compile(checkpointer=cp)
        thread = new_thread()
        app.invoke({"messages": []}, thread_id=thread, recursion_limit=n + 10, durability="sync")
        hist = list(app.get_state_history(thread))
        mid = hist[len(hist) // 2]
        mid_id = _cid(mid)
        mid_len = len(mid.values["messages"])
        for _ in range(reps):
            t, hist = timed(lambda: list(app.get_state_history(thread)))
            assert len(hist) >= n
            res["history"].append(t)
            t, st = timed(app.get_state, thread)
            assert len(st.values["messages"]) == n
            res["latest"].append(t)
            t, st = timed(app.get_state, thread, checkpoint_id=mid_id)
            assert len(st.values["messages"]) == mid_len
            res["by_id"].append(t)
        if backend in ("sqlite", "postgres"):
            other = new_thread()  # a thread the cold readers read first, untimed: the
            app.invoke({"messages": []}, thread_id=other, recursion_limit=n + 10, durability="sync")
            for _ in range(reps):  # connection and statements are warm, the thread is not
                for op, kw, want in (("latest_cold", {}, n), ("by_id_cold", {"checkpoint_id": mid_id}, mid_len)):
                    with saver(env, backend, dsn=dsn, path=path) as cold:
                        reader = chat_graph(msgs).compile(checkpointer=cold)
                        reader.get_state(other)
                        t, st = timed(reader.get_state, thread, **kw)
                        assert len(st.values["messages"]) == want
                        res[op].append(t)
    return res


def w5(env: Env, backend: str, reps: int) -> list[float]:
    """Seconds to resume a chain whose middle node failed once; the first node must not re-run."""
    from plait import NodeError

    samples = []
    with saver(env, backend) as cp:
        for _ in range(reps):
            calls: dict[str, int] = {}
            app = chain_graph(calls).compile(checkpointer=cp)
            thread = new_thread()
            with contextlib.suppress(NodeError, RuntimeError):
                app.invoke({"log": []}, thread_id=thread, durability="sync")
            assert calls == {"a": 1, "b": 1}, calls
            t, out = timed(app.invoke, None, thread_id=thread, durability="sync")
            assert calls == {"a": 1, "b": 2, "c": 1}, calls
            assert out["log"] == ["a", "b", "c"], out
            samples.append(t)
    return samples


def w6(env: Env, backend: str, updates: int, reps: int) -> dict[str, list[float]]:
    """Seconds for ``updates`` update_state calls, and for forking at step 10 of 20 and continuing."""
    res: dict[str, list[float]] = {"update_state": [], "update_past": [], "fork_continue": []}
    with saver(env, backend) as cp:
        app = counter_graph(20).compile(checkpointer=cp)
        for _ in range(reps):
            thread = new_thread()
            app.invoke({"n": 0}, thread_id=thread, durability="sync")

            def many_updates(thread: str = thread) -> None:
                for i in range(updates):
                    app.update_state(thread, {"n": i})

            t, _ = timed(many_updates)
            assert app.get_state(thread).values["n"] == updates - 1
            res["update_state"].append(t)

            past = _cid(next(h for h in app.get_state_history(thread) if h.values.get("n") == 10 and h.next))

            def past_updates(thread: str = thread, past: str = past) -> None:
                for i in range(updates):
                    app.update_state(thread, {"n": 1000 + i}, checkpoint_id=past)

            t, _ = timed(past_updates)
            st = app.get_state(thread)
            assert st.values["n"] == 1000 + updates - 1 and st.parent_id == past, st
            res["update_past"].append(t)

            thread = new_thread()
            app.invoke({"n": 0}, thread_id=thread, durability="sync")
            mid = next(h for h in app.get_state_history(thread) if h.values.get("n") == 10 and h.next)

            def fork_continue(thread: str = thread, mid: Any = mid) -> Any:
                target = new_thread()
                app.fork_state(thread, _cid(mid), target)
                app.update_state(target, {"n": 10})
                return app.invoke(None, thread_id=target, durability="sync")

            t, out = timed(fork_continue)
            assert out["n"] == 20, out
            res["fork_continue"].append(t)
    return res


# --------------------------------------------------------------------------- W7 (child process)


async def w7_run(path: str, threads: int, steps: int, durability: str) -> float:
    """Seconds to run ``threads`` counter threads of ``steps`` steps at once on one SQLite file."""
    async with asaver(None, "sqlite", path=path) as cp:
        app = counter_graph(steps).compile(checkpointer=cp)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        outs = await asyncio.gather(
            *(
                app.ainvoke({"n": 0}, thread_id=f"t{i}", recursion_limit=steps + 10, durability=durability)
                for i in range(threads)
            )
        )
        t = loop.time() - t0
        for thread in ("t0", f"t{threads - 1}"):  # what was returned is also what was stored
            assert (await app.aget_state(thread)).values["n"] == steps
    assert all(o["n"] == steps for o in outs)
    return t
