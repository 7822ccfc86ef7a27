"""The channelled-state layer on its own: a schema, reducers, versions, snapshots and a diff.

Run it: python examples/state_basics.py
"""

from plait import AppendList, AppendMessages, MergeMap, RunState, StateSchema, Sum, diff, remove_message


def main() -> None:
    schema = (
        StateSchema.builder()
        .add("messages", AppendMessages())
        .add("log", AppendList())
        .add("config", MergeMap())
        .add("tokens", Sum())
        .add_lww("phase")
        .build()
    )
    state = RunState(schema)
    state.subscribe(lambda e: print(f"  v{e.version} step {e.super_step}: wrote {', '.join(e.keys)}"))

    print("super-step 0")
    state.merge_writes([("messages", {"role": "user", "content": "Plan a trip to Lisbon"}), ("phase", "plan")])
    before = state.snapshot("after the question")
    state.advance()

    print("super-step 1: two parallel branches merge through the reducers")
    state.merge_writes(
        [
            ("log", "flights searched"),
            ("tokens", 120),
            ("config", {"currency": "EUR"}),
            ("log", "hotels searched"),
            ("tokens", 95),
            ("messages", {"id": "draft", "role": "assistant", "content": "Draft itinerary..."}),
        ]
    )
    state.advance()

    print("super-step 2: the draft is replaced in place (same id), then removed")
    state.write("messages", {"id": "draft", "role": "assistant", "content": "Final itinerary: 3 days"})
    after = state.snapshot("after the answer")
    state.write("messages", remove_message("draft"))

    print("\nfinal state:", state.to_dict())
    print("fingerprint:", state.fingerprint)
    changes = diff(before, after)
    print("diff between the snapshots:", ", ".join(changes.keys))
    for snap in state.history:
        print(f"  snapshot v{snap.version} {snap.label!r} {snap.fingerprint[:12]}")


if __name__ == "__main__":
    main()
