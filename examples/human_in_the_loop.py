"""Human in the loop: a node pauses on interrupt(), a person answers, the run continues.

The refund is an external side effect: ``ctx.once`` records its result in the checkpoint
store, so re-running the node (which is what a resume does) never pays twice.

Run it: python examples/human_in_the_loop.py
"""

from typing import Any

from plait import END, START, AppendList, Command, Graph, MemoryCheckpointer, NodeContext, StateSchema, interrupt

schema = StateSchema.builder().add_lww("request").add_lww("decision").add("log", AppendList()).build()
payments: list[str] = []  # stands in for a payment provider


def triage(state: Any) -> dict[str, Any]:
    return {"log": [f"triaged: {state['request']['reason']}"]}


def refund(state: Any, ctx: NodeContext) -> dict[str, Any]:
    request = state["request"]

    def pay() -> str:
        payments.append(request["order"])
        return f"refund-{request['order']}"

    receipt = ctx.once("pay", pay)  # before the question: the payment is prepared exactly once
    decision = interrupt({"question": "Approve this refund?", "order": request["order"], "amount": request["amount"]})
    if not decision["approve"]:
        return {"decision": "refused", "log": [f"refused by {decision['by']}"]}
    return {"decision": "refunded", "log": [f"{receipt} approved by {decision['by']}"]}


graph = Graph(schema)
graph.add_node("triage", triage).add_node("refund", refund)
graph.add_edge(START, "triage").add_edge("triage", "refund").add_edge("refund", END)


def main() -> None:
    app = graph.compile(checkpointer=MemoryCheckpointer())
    request = {"order": "A-1042", "amount": 35.0, "reason": "parcel arrived damaged"}
    out = app.invoke({"request": request}, thread_id="ticket-7")

    pending = out["__interrupt__"][0]
    print("paused, asking:", pending.value)
    state = app.get_state("ticket-7")
    print("next:", state.next, "| waiting on:", [i.id for i in state.interrupts])

    out = app.invoke(Command(resume={"approve": True, "by": "dana"}), thread_id="ticket-7")
    print("decision:", out["decision"])
    print("log:", list(out["log"]))
    print("payments made:", payments, "(once, although the node ran twice)")


if __name__ == "__main__":
    main()
