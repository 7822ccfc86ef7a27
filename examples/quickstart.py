"""Quickstart: a small graph on SQLite, run, inspected, and forked from an earlier checkpoint.

Run it: python examples/quickstart.py   (it writes quickstart.db in the current folder)
"""

from typing import Any

from plait import END, START, AppendList, Graph, StateSchema, Sum

schema = (
    StateSchema.builder()
    .add_lww("topic")
    .add("notes", AppendList())  # parallel branches append; nothing is lost
    .add("cost", Sum())  # every branch adds its cost
    .add_lww("summary")
    .build()
)


def outline(state: Any) -> dict[str, Any]:
    return {"notes": [f"outline for {state['topic']}"], "cost": 1}


def facts(state: Any) -> dict[str, Any]:
    return {"notes": [f"3 facts about {state['topic']}"], "cost": 2}


def quotes(state: Any) -> dict[str, Any]:
    return {"notes": [f"2 quotes on {state['topic']}"], "cost": 2}


def write(state: Any) -> dict[str, Any]:
    return {"summary": f"{state['topic']}: " + "; ".join(state["notes"]), "cost": 5}


graph = Graph(schema)
graph.add_node("outline", outline).add_node("facts", facts).add_node("quotes", quotes).add_node("write", write)
graph.add_edge(START, "outline")
graph.add_edge("outline", "facts").add_edge("outline", "quotes")  # fan-out: one super-step, in parallel
graph.add_edge(["facts", "quotes"], "write")  # a join: write runs once, after both
graph.add_edge("write", END)


def main() -> None:
    app = graph.compile(checkpointer="quickstart.db")  # a SQLite file: the embedded default
    for thread in ("tides", "tides-volcanoes"):
        app.delete_thread(thread)  # start afresh each time this file runs

    result = app.invoke({"topic": "tides"}, thread_id="tides")
    print("summary:", result["summary"])
    print("cost:   ", result["cost"])

    print("\nhistory (newest first):")
    history = app.get_state_history("tides")
    for h in history:
        print(f"  step {h.step}  {h.source:<5}  next={list(h.next)}  writes={dict(h.metadata.get('writes', {}))}")

    # Time travel: fork the checkpoint taken right after the input, with another topic.
    first = history[-1]
    app.fork("tides", "tides-volcanoes", checkpoint_id=first.checkpoint_id, edits={"topic": "volcanoes"})
    forked = app.invoke(None, thread_id="tides-volcanoes")
    print("\nfork summary:", forked["summary"])
    d = app.diff_threads("tides", "tides-volcanoes")
    print(f"the threads part ways at step {d.first_step} on {list(d.keys)}")
    print("\nlook around: plait threads --db quickstart.db ; plait history tides --db quickstart.db")


if __name__ == "__main__":
    main()
