"""plait._gc_pause: the cyclic collector is off inside a pause, back on after the last one
ends in any thread, and left off for a program that had switched it off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plait
from plait._gc_pause import gc_paused
from plait.checkpoint import delta


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_pause_switches_the_collector_off_and_back_on_even_on_error() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_the_collector_comes_back_when_the_last_overlapping_pause_ends() -> None:
    inside, release, done = threading.Event(), threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's pause still runs
    release.set()
    assert done.wait(10)
    thread.join()
    assert gc.isenabled()


def test_a_program_that_switched_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    with gc_paused(), gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def _chat(n: int) -> Any:
    g = plait.Graph(plait.StateSchema.builder().add("messages", plait.AppendList()).build())
    g.add_node("say", lambda s: {"messages": [{"i": len(s["messages"])}]})
    g.add_edge(plait.START, "say")
    g.add_conditional_edges("say", lambda s: "say" if len(s["messages"]) < n else plait.END)
    return g


def test_a_history_read_runs_no_collection_while_it_builds(tmp_path: Path, monkeypatch: Any) -> None:
    seen: list[bool] = []
    replay = delta.replay

    def spying(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return replay(*args, **kwargs)

    monkeypatch.setattr(delta, "replay", spying)
    with plait.SqliteCheckpointer(str(tmp_path / "h.db")) as store:
        app = _chat(40).compile(checkpointer=store)
        app.invoke({"messages": []}, thread_id="t", recursion_limit=60)
        seen.clear()
        history = app.get_state_history("t")
    assert [len(s.values["messages"]) for s in history] == list(range(40, -1, -1))
    assert seen and not any(seen)  # every replay of the read ran with the collector off
    assert gc.isenabled()


def test_the_snapshots_of_a_history_are_built_with_the_collector_off(monkeypatch: Any) -> None:
    from plait.graph.records import ThreadState

    seen: list[bool] = []
    of = ThreadState.of

    def spying(cp: Any) -> Any:
        seen.append(gc.isenabled())
        return of(cp)

    monkeypatch.setattr(ThreadState, "of", staticmethod(spying))
    app = _chat(5).compile(checkpointer=plait.MemoryCheckpointer())
    app.invoke({"messages": []}, thread_id="t", recursion_limit=20)
    seen.clear()
    assert len(app.get_state_history("t")) == 6
    assert len(seen) == 6 and not any(seen)
    assert gc.isenabled()
