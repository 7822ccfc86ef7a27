"""Map-reduce with Send: one task per item, all in one super-step, merged by reducers.

Run it: python examples/map_reduce.py
"""

from typing import Any

from plait import END, START, AppendList, Graph, MemoryCheckpointer, MergeMap, Send, StateSchema, Sum

schema = (
    StateSchema.builder()
    .add_lww("documents")
    .add("lengths", MergeMap())  # each task adds one key
    .add("words", Sum())  # each task adds its count
    .add("done", AppendList())
    .add_lww("report")
    .build()
)


def split(state: Any) -> dict[str, Any]:
    return {"done": ["split"]}


def fan_out(state: Any) -> list[Send]:
    """The router: one Send per document; each runs ``count`` with that document as input."""
    return [Send("count", {"name": name, "text": text}) for name, text in state["documents"].items()]


def count(doc: Any) -> dict[str, Any]:
    n = len(doc["text"].split())
    return {"lengths": {doc["name"]: n}, "words": n, "done": [f"count:{doc['name']}"]}


def report(state: Any) -> dict[str, Any]:
    longest = max(state["lengths"], key=lambda k: state["lengths"][k])
    return {"report": f"{len(state['lengths'])} documents, {state['words']} words; longest: {longest}"}


graph = Graph(schema)
graph.add_node("split", split).add_node("count", count).add_node("report", report)
graph.add_edge(START, "split")
graph.add_conditional_edges("split", fan_out)  # no path_map: the router returns Sends
graph.add_edge("count", "report")
graph.add_edge("report", END)


def main() -> None:
    app = graph.compile(checkpointer=MemoryCheckpointer())
    docs = {
        "a.txt": "the tide comes in",
        "b.txt": "and the tide goes out again",
        "c.txt": "moon",
    }
    out = app.invoke({"documents": docs}, thread_id="batch-1")
    print(out["report"])
    print("per document:", dict(out["lengths"]))
    print("order of work:", list(out["done"]))
    print("draw it: plait draw examples/map_reduce.py:graph --format ascii")


if __name__ == "__main__":
    main()
