"""An agent that remembers a user across threads (the program docs/memory.md walks through).

Each chat is a thread; what the agent learns about a user is kept in the memory store, in the
same SQLite file as the checkpoints, so a new chat recalls it. A rule-based "model" and a
three-number embedding stand in for real ones, so this runs offline.

Run it: python examples/memory_agent.py   (it writes memory_agent.db in the current folder)
"""

import pathlib
import re
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from plait import END, START, AppendMessages, Graph, NodeContext, SqliteCheckpointer, Store

TOPICS = {
    "food": ("vegetarian", "vegan", "meat", "fish", "cook", "dinner", "eat", "lunch"),
    "travel": ("train", "plane", "fly", "flight", "trip", "car", "bike"),
    "style": ("short", "brief", "long", "detail", "answers"),
}


def embed(texts: list[str]) -> list[list[float]]:
    """One number per topic: how many of its words a text has (an embedding model's stand-in)."""
    vectors = []
    for text in texts:
        words = re.findall(r"[a-z]+", text.lower())
        vectors.append([float(sum(w in vocabulary for w in words)) for vocabulary in TOPICS.values()])
    return vectors


def topic_of(text: str) -> str:
    scores = embed([text])[0]
    return list(TOPICS)[scores.index(max(scores))] if max(scores) > 0 else "other"


FACT = re.compile(r"\bI(?:'m| am| prefer| like| take| eat)\b[^.,!?]*")


def facts_in(text: str) -> list[str]:
    """What a message says about its writer: "I'm vegetarian", "I prefer short answers"."""
    return [m.group(0) for m in FACT.finditer(text)]


DISHES = {"vegan": "a chickpea curry", "vegetarian": "a mushroom risotto"}


def suggest_dinner(memories: list[str], style: str | None) -> str:
    """The "model": a dinner that fits what it recalled, as briefly as the user likes."""
    diet = next((d for d in DISHES for m in memories if d in m.lower()), None)
    dish = DISHES[diet] if diet else "a steak with greens"
    if style and "short" in style:
        return f"{dish[0].upper()}{dish[1:]}."
    if diet:
        return f"How about {dish}? You told me: {memories[0]!r}."
    return f"How about {dish}? I know nothing about what you eat yet: tell me, and I will remember it."


for leftover in pathlib.Path().glob("memory_agent.db*"):
    leftover.unlink()
cp = SqliteCheckpointer("memory_agent.db")
store = Store(cp, index={"dims": len(TOPICS), "embed": embed, "fields": ["text"]})


class Chat(TypedDict):
    messages: Annotated[list[dict[str, Any]], AppendMessages()]
    recalled: list[str]


@dataclass
class User:
    id: str


def memories_of(ctx: NodeContext) -> tuple[str, ...]:
    return ("users", ctx.context.id, "memories")


def recall(state: Chat, ctx: NodeContext) -> dict[str, Any]:
    """Find the memories that bear on the user's message: by meaning, the style left out."""
    question = state["messages"][-1]["content"]
    hits = ctx.store.search(memories_of(ctx), query=question, filter={"topic": {"$ne": "style"}}, limit=3)
    return {"recalled": [hit.value["text"] for hit in hits if hit.score is not None and hit.score > 0.5]}


def respond(state: Chat, ctx: NodeContext) -> dict[str, Any]:
    """Remember what the user says about themselves; otherwise answer with what was recalled."""
    text = state["messages"][-1]["content"]
    if facts := facts_in(text):
        for fact in facts:  # one memory per topic: a newer statement replaces the older one
            value = {"text": fact, "topic": topic_of(fact), "learned_in": {"thread": ctx.thread_id}}
            ctx.store.put(memories_of(ctx), value["topic"], value)
        reply = "Noted: " + "; ".join(facts) + "."
    else:
        style = ctx.store.get(memories_of(ctx), "style")  # a known key: no search needed
        reply = suggest_dinner(state["recalled"], style.value["text"] if style else None)
    return {"messages": [{"role": "assistant", "content": reply}]}


graph = Graph(Chat, context=User)
graph.add_sequence([recall, respond]).add_edge(START, "recall").add_edge("respond", END)
app = graph.compile(checkpointer=cp, store=store)


def say(user: str, thread: str, text: str) -> None:
    out = app.invoke({"messages": [{"role": "user", "content": text}]}, thread_id=thread, context={"id": user})
    recalled = f"   (recalled: {out['recalled']})" if out["recalled"] else ""
    print(f"[{thread}] {user}: {text}\n[{thread}] agent: {out['messages'][-1]['content']}{recalled}")


say("ada", "chat-1", "Hi! I'm vegetarian, I take the train everywhere, and I prefer short answers.")
say("ada", "chat-2", "What should I cook tonight?")
say("ada", "chat-2", "Actually I'm vegan now.")
say("ada", "chat-2", "And tomorrow, what should I cook?")
say("bob", "chat-3", "What should I cook tonight?")

# Outside any run: the same memories, through the checkpointer's own store (same file).
print("\nnamespaces:", cp.store.list_namespaces(prefix=("users",)))
for item in cp.store.search(("users",), filter={"learned_in.thread": "chat-1"}):
    print(f"learned in chat-1: {item.key} = {item.value['text']!r}")
for hit in store.search(("users", "ada"), query="booking a trip"):
    print(f"'booking a trip' ~ {hit.value['text']!r}: {hit.score:.2f}")
cp.close()

with SqliteCheckpointer("memory_agent.db") as again:  # as another process would open it
    food = again.store.get(("users", "ada", "memories"), "food")
    assert food is not None
    print(f"\nreopened: ada's food memory is {food.value['text']!r}, from {food.value['learned_in']['thread']}")
    print("rewritten since it was first learned:", food.updated_at > food.created_at)
