"""A tool-calling agent with persistence, human approval and a crash resume (the tutorial's
program, docs/tutorial.md, in one file).

A scripted chat model (chat_model.py) stands in for an LLM, so this runs offline. The agent
looks up the weather and sends emails; an email waits for a human's approval; the process that
sends it is killed in the middle of the send; a new process resumes the thread, does not
repeat the weather look-up (its result was recorded), and sends the email again with the same
idempotency key, which the "mail server" recognises, so the email goes out once.

Run it: python examples/agent.py   (it writes agent.db and outbox.json in the current folder)
"""

import json
import os
import pathlib
import subprocess
import sys
from typing import Annotated, Any

from chat_model import RULES, ScriptedChatModel

from plait import (
    END,
    START,
    Command,
    Graph,
    MessagesState,
    NodeContext,
    Sum,
    interrupt,
    tool_node,
    tools_condition,
)

model = ScriptedChatModel(RULES)
OUTBOX = pathlib.Path("outbox.json")  # stands in for a mail server that honours idempotency keys
WEATHER_LOOKUPS: list[str] = []


class State(MessagesState):
    model_calls: Annotated[int, Sum()]


def get_weather(city: str) -> str:
    WEATHER_LOOKUPS.append(city)
    return {"Oslo": "4°C, light rain", "Lisbon": "19°C, sunny"}.get(city, "no data")


def send_email(to: str, body: str, idempotency_key: str) -> str:
    sent = json.loads(OUTBOX.read_text()) if OUTBOX.exists() else {}
    if idempotency_key not in sent:  # the server's side of the idempotency-key pattern
        sent[idempotency_key] = {"to": to, "body": body, "id": f"msg-{len(sent) + 1}"}
        OUTBOX.write_text(json.dumps(sent))
    if os.environ.get("AGENT_CRASH_AFTER_SEND"):
        os._exit(137)  # killed after the server acted, before plait recorded the result
    return f"sent {sent[idempotency_key]['id']} to {to}"


def agent(state: Any, ctx: NodeContext) -> dict[str, Any]:
    reply = ctx.stream_message(model.stream(state["messages"]))  # to stream(mode="messages"), piece by piece
    return {"messages": [reply], "model_calls": 1}


def approval_request(emails: list[dict[str, Any]]) -> dict[str, Any]:
    """The question, in LangChain's human-in-the-loop shape: agent-chat-ui draws it as an
    approval card (Approve / Reject) and answers {"decisions": [{"type": "approve"}, ...]}."""
    return {
        "action_requests": [{"name": "send_email", "args": e, "description": f"Email {e['to']}"} for e in emails],
        "review_configs": [{"action_name": "send_email", "allowed_decisions": ["approve", "reject"]}],
    }


def approved(answer: Any) -> bool:
    """Approved: "yes" (the SDK, `plait resume`), or decisions that approve every email."""
    if isinstance(answer, dict):
        decisions = answer.get("decisions") or []
        return bool(decisions) and all(d.get("type") == "approve" for d in decisions)
    return bool(answer == "yes")


def review(state: Any) -> Command:
    """Emails wait for a human; everything else goes straight to the tools."""
    calls = state["messages"][-1]["tool_calls"]
    emails = [c["args"] for c in calls if c["name"] == "send_email"]
    if emails and not approved(interrupt(approval_request(emails))):
        declined = [
            {"type": "tool", "tool_call_id": c["id"], "name": c["name"], "content": "declined by the user"}
            for c in calls
        ]
        return Command(update={"messages": declined}, goto="agent")
    return Command(goto="tools")


graph = Graph(State)
graph.add_node("agent", agent)
graph.add_node("review", review, destinations=["tools", "agent"])
graph.add_node("tools", tool_node([get_weather, send_email]))
graph.add_edge(START, "agent")
graph.add_conditional_edges("agent", tools_condition, {"tools": "review", END: END})
graph.add_edge("tools", "agent")


def child() -> None:
    """Approve the email, and be killed in the middle of sending it."""
    with graph.compile(checkpointer="agent.db") as app:
        app.invoke(Command(resume="yes"), thread_id="ann")


def main() -> None:
    for leftover in ("agent.db", "agent.db-wal", "agent.db-shm", "outbox.json"):
        pathlib.Path(leftover).unlink(missing_ok=True)
    ask = "What's the weather in Oslo? Then email ann@example.com saying bring a coat"
    with graph.compile(checkpointer="agent.db") as app:
        out = app.invoke({"messages": [{"role": "user", "content": ask}]}, thread_id="ann")
        print("paused for approval:", [a["args"] for a in out["__interrupt__"][0].value["action_requests"]])

    env = {**os.environ, "AGENT_CRASH_AFTER_SEND": "1"}
    code = subprocess.run([sys.executable, __file__, "child"], env=env, check=False).returncode
    print(f"the process sending the email died (exit {code}); the outbox has {len(json.loads(OUTBOX.read_text()))}")

    WEATHER_LOOKUPS.clear()
    with graph.compile(checkpointer="agent.db") as app:
        print("thread status after the crash:", app.get_state("ann").status)
        out = app.invoke(None, thread_id="ann")  # resume: the dead run's lease is taken over at once
        print("reply:", out["messages"][-1]["content"])
        print("weather look-ups in this process:", len(WEATHER_LOOKUPS), "(its result was recorded before the crash)")
        print("emails in the outbox:", len(json.loads(OUTBOX.read_text())), "(sent again with the same key: once)")
        print("model calls:", out["model_calls"])
    print("look at it: plait history ann --db agent.db")


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        child()
    else:
        main()
