"""Laws of the state layer, checked with hypothesis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plait import (
    AppendList,
    AppendMessages,
    LastWriteWins,
    MaxByTimestamp,
    MergeMap,
    Reducer,
    RunState,
    StateSchema,
    Sum,
    remove_message,
)
from plait._codec import freeze

SETTINGS = settings(max_examples=100, deadline=None, database=None)
#: The algebraic laws are checked on small values; fewer examples keep the file fast.
LAW = settings(max_examples=60, deadline=None, database=None)


def make_schema() -> StateSchema:
    """One channel per built-in reducer. The child process of the fingerprint test builds it too."""
    return (
        StateSchema.builder()
        .add("messages", AppendMessages())
        .add("log", AppendList())
        .add("meta", MergeMap())
        .add("deep", MergeMap(deep=True))
        .add("latest", MaxByTimestamp())
        .add("total", Sum())
        .add_lww("phase")
        .build()
    )


# -- strategies -----------------------------------------------------------------------------

keys = st.text(min_size=0, max_size=6)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=8,
)
json_dicts = st.dictionaries(keys, json_values, max_size=3)
nested_dicts = st.recursive(
    st.dictionaries(st.sampled_from("abc"), scalars, max_size=3),
    lambda inner: st.dictionaries(st.sampled_from("abcd"), inner | scalars, max_size=3),
    max_leaves=8,
)
ids = st.sampled_from(["a", "b", "c", "d"])
messages_with_id = st.builds(lambda i, text: {"id": i, "text": text}, ids, st.text(max_size=5))
messages_without_id = st.builds(
    lambda role, text: {"role": role, "text": text}, st.sampled_from(["user", "ai"]), st.text(max_size=5)
)
messages = messages_with_id | messages_without_id
records = st.builds(lambda ts, v: {"ts_ms": ts, "v": v}, st.integers(0, 20), st.integers(0, 3))
small_ints = st.integers(min_value=-(10**9), max_value=10**9)

writes = st.one_of(
    st.tuples(st.just("messages"), messages | st.lists(messages, max_size=3)),
    st.tuples(st.just("log"), json_values),
    st.tuples(st.just("meta"), json_dicts),
    st.tuples(st.just("deep"), nested_dicts),
    st.tuples(st.just("latest"), records),
    st.tuples(st.just("total"), small_ints | st.floats(min_value=-1e6, max_value=1e6)),
    st.tuples(st.just("phase"), json_values),
)
write_lists = st.lists(writes, max_size=12)


def _run(ws: list[tuple[str, Any]], batch_size: int = 1) -> RunState:
    state = RunState(make_schema())
    for i in range(0, len(ws), batch_size):
        state.merge_writes(ws[i : i + batch_size])
    return state


# -- (1) determinism ------------------------------------------------------------------------


@SETTINGS
@given(write_lists)
def test_same_writes_in_the_same_order_give_the_same_fingerprint(ws: list[tuple[str, Any]]) -> None:
    a, b = _run(ws), _run(ws)
    assert a.fingerprint == b.fingerprint
    assert a.to_dict() == b.to_dict()
    # Through JSON and back (what a checkpoint or another process sees) changes nothing either.
    c = _run(json.loads(json.dumps(ws)))
    assert c.fingerprint == a.fingerprint


CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_state_properties import make_schema
from plait import RunState
out = []
for ws in json.loads(sys.stdin.read()):
    state = RunState(make_schema())
    for key, value in ws:
        state.write(key, value)
    out.append(state.fingerprint)
print(json.dumps(out))
"""


@settings(max_examples=4, deadline=None, database=None)
@given(st.lists(write_lists, min_size=1, max_size=25))
def test_same_writes_give_the_same_fingerprint_in_another_process(runs: list[list[tuple[str, Any]]]) -> None:
    expected = [_run(ws).fingerprint for ws in runs]
    env = {**os.environ, "PYTHONHASHSEED": "4242"}  # a different str hash than this process
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(Path(__file__).parent)],
        input=json.dumps(runs),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert json.loads(child.stdout) == expected


# -- (2) snapshots round-trip ---------------------------------------------------------------


@SETTINGS
@given(write_lists, st.integers(0, 5), st.text(max_size=5))
def test_a_snapshot_round_trips_through_from_snapshot(ws: list[tuple[str, Any]], steps: int, label: str) -> None:
    state = _run(ws, batch_size=3)
    for _ in range(steps):
        state.advance()
    snap = state.snapshot(label)
    restored = RunState.from_snapshot(make_schema(), snap.values, snap.super_step)
    assert restored.values == snap.values
    assert restored.fingerprint == snap.fingerprint
    assert restored.super_step == snap.super_step == steps
    assert restored.snapshot(label).fingerprint == snap.fingerprint
    # and through JSON, as a checkpoint store would keep it
    again = RunState.from_snapshot(make_schema(), json.loads(json.dumps(snap.values)), snap.super_step)
    assert again.fingerprint == snap.fingerprint


# -- (3) incremental reducers: a batch folds like its items one by one ------------------------


def _fold(reducer: Reducer, current: Any, *incoming: Any) -> Any:
    for value in incoming:
        current = reducer.reduce(current, freeze(value, "ch"), "ch")
    return current


def _message_ops(draw: st.DrawFn, present: set[str]) -> list[dict[str, Any]]:
    """Upserts (same and new ids, and messages without one) and removals of ids present."""
    ops: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 8))):
        if present and draw(st.integers(0, 3)) == 0:  # a removal one time in four
            target = draw(st.sampled_from(sorted(present)))
            ops.append(remove_message(target))
            present.discard(target)
        else:
            msg = draw(messages_with_id)
            present.add(msg["id"])
            ops.append(msg)
    return ops


@st.composite
def message_histories(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    # A starting history names its messages without an id by position, as a default would.
    start = AppendMessages().normalize(freeze(draw(st.lists(messages, max_size=5)), "ch"), "ch")
    present = {m["id"] for m in start}
    return start, _message_ops(draw, present)


def test_the_built_in_incremental_reducers_are_the_expected_ones() -> None:
    incremental = {
        type(r).__name__ for r in (AppendList(), AppendMessages(), MergeMap(), Sum(), MaxByTimestamp()) if r.incremental
    }
    assert incremental == {"AppendList", "AppendMessages", "MergeMap"}
    assert not LastWriteWins().incremental


@SETTINGS
@given(message_histories())
def test_append_messages_batch_equals_items_one_by_one(case: tuple[Any, list[dict[str, Any]]]) -> None:
    start, ops = case
    reducer = AppendMessages()
    assert _fold(reducer, start, ops) == _fold(reducer, start, *ops)


@SETTINGS
@given(st.lists(json_values, max_size=5), st.lists(json_values, max_size=6))
def test_append_list_batch_equals_items_one_by_one(start: list[Any], items: list[Any]) -> None:
    reducer = AppendList()
    current = freeze(start, "ch")
    assert _fold(reducer, current, items) == _fold(reducer, current, *([item] for item in items))


@SETTINGS
@given(json_dicts, json_dicts)
def test_merge_map_batch_equals_items_one_by_one(start: dict[str, Any], batch: dict[str, Any]) -> None:
    reducer = MergeMap()
    current = freeze(start, "ch")
    assert _fold(reducer, current, batch) == _fold(reducer, current, *({k: v} for k, v in batch.items()))


@SETTINGS
@given(nested_dicts, nested_dicts)
def test_deep_merge_map_batch_equals_items_one_by_one(start: dict[str, Any], batch: dict[str, Any]) -> None:
    reducer = MergeMap(deep=True)
    current = freeze(start, "ch")
    assert _fold(reducer, current, batch) == _fold(reducer, current, *({k: v} for k, v in batch.items()))


# -- (4) a merged batch equals the same writes one at a time --------------------------------


@SETTINGS
@given(write_lists)
def test_merge_writes_equals_the_sequence_of_single_writes(ws: list[tuple[str, Any]]) -> None:
    batched = RunState(make_schema())
    batched.merge_writes(ws)
    single = _run(ws)
    assert batched.to_dict() == single.to_dict()
    assert batched.fingerprint == single.fingerprint
    assert batched.version == (1 if ws else 0)
    assert single.version == len(ws)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3"]), write_lists), max_size=6))
def test_fold_many_equals_folding_each_node_s_writes_in_turn(batches: list[tuple[str, list[Any]]]) -> None:
    """What a super-step's merge does: writes grouped by channel, appends extended at once.
    Each node's writes come frozen and with their messages named by its task, as the engine
    gives them."""
    state = _run([("log", ["start"]), ("total", 1)])
    base = state.values
    schema = state.schema
    batches = [
        (node, schema.with_ids([(k, freeze(v, k)) for k, v in ws], f"task-{i}")) for i, (node, ws) in enumerate(batches)
    ]
    grouped = state.fold_many(base, [(ws, node) for node, ws in batches])
    folded: dict[str, Any] = {}
    for node, ws in batches:
        folded.update(state.fold({**base, **folded}, ws, node))
    assert grouped == folded
    assert list(grouped) == list(dict.fromkeys(k for _, ws in batches for k, _ in ws))


@LAW
@given(st.lists(json_values, max_size=4), st.lists(st.lists(json_values, max_size=3) | json_values, max_size=5))
def test_append_list_extend_all_equals_reduce_in_turn(current: list[Any], incoming: list[Any]) -> None:
    reducer = AppendList()
    start = freeze(current, "ch")
    frozen = [freeze(v, "ch") for v in incoming]
    assert reducer.extend_all(start, frozen) == _fold(reducer, start, *incoming)
    assert start == current, "the current value is copied, never changed"


@SETTINGS
@given(st.data())
def test_merge_writes_with_removals_equals_single_writes(data: st.DataObject) -> None:
    start, ops = data.draw(message_histories())
    batched = RunState.from_snapshot(make_schema(), {"messages": start}, 0)
    single = RunState.from_snapshot(make_schema(), {"messages": start}, 0)
    batched.merge_writes([("messages", op) for op in ops])
    for op in ops:
        single.write("messages", op)
    assert batched.fingerprint == single.fingerprint
    assert batched["messages"] == single["messages"]


# -- message ids: a message written without one is never merged into another ---------------


@SETTINGS
@given(
    st.lists(
        st.lists(st.builds(lambda c: {"role": "user", "content": c}, st.sampled_from(["yes", "no"])), max_size=3)
        | st.builds(lambda c: {"role": "user", "content": c}, st.sampled_from(["yes", "no"])),
        max_size=8,
    ),
    st.sampled_from(["single", "batch", "task"]),
)
def test_every_message_written_without_an_id_is_kept_with_an_id_of_its_own(ws: list[Any], how: str) -> None:
    state = RunState(make_schema())
    writes = [("messages", w) for w in ws]
    if how == "single":
        for w in writes:
            state.merge_writes([w])
    elif how == "batch":
        state.merge_writes(writes)
    else:  # as a node's task writes them
        state.merge_writes(state.schema.with_ids([(k, freeze(v, k)) for k, v in writes], "task"))
    flat = [m for w in ws for m in (w if isinstance(w, list) else [w])]
    kept = state["messages"]
    assert [m["content"] for m in kept] == [m["content"] for m in flat]
    assert len({m["id"] for m in kept}) == len(flat)


# -- associativity: reduce(reduce(a, b), c) == reduce(a, reduce(b, c)) ----------------------


def _assoc(reducer: Reducer, a: Any, b: Any, c: Any) -> None:
    fa, fb, fc = (freeze(x, "ch") for x in (a, b, c))
    left = reducer.reduce(reducer.reduce(fa, fb, "ch"), fc, "ch")
    right = reducer.reduce(fa, reducer.reduce(fb, fc, "ch"), "ch")
    assert left == right
    assert type(left) is type(right)


@LAW
@given(small_ints, small_ints, small_ints)
def test_sum_is_associative_on_ints(a: int, b: int, c: int) -> None:
    _assoc(Sum(), a, b, c)


@LAW
@given(json_dicts, json_dicts, json_dicts)
def test_merge_map_is_associative(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> None:
    _assoc(MergeMap(), a, b, c)


def _kinds_agree(*maps: Any) -> bool:
    """Whether no key path holds a dict in one map and a non-dict in another: the domain on
    which a deep merge is associative (see MergeMap's docstring)."""
    dicts = [m for m in maps if isinstance(m, dict)]
    if dicts and len(dicts) != len(maps):
        return False
    for key in {k for m in dicts for k in m}:
        if not _kinds_agree(*(m[key] for m in dicts if key in m)):
            return False
    return True


@LAW
@given(nested_dicts, nested_dicts, nested_dicts)
def test_deep_merge_map_is_associative(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> None:
    assume(_kinds_agree(a, b, c))
    _assoc(MergeMap(deep=True), a, b, c)


def test_deep_merge_is_not_associative_when_a_key_switches_kind() -> None:
    """The documented exception: a non-dict replaces a whole subtree, so order matters."""
    a, b = {"a": {"a": None}}, {"a": None}
    c: dict[str, dict[str, Any]] = {"a": {}}
    m = MergeMap(deep=True)
    fa, fb, fc = (freeze(x, "ch") for x in (a, b, c))
    assert m.reduce(m.reduce(fa, fb, "ch"), fc, "ch") == {"a": {}}
    assert m.reduce(fa, m.reduce(fb, fc, "ch"), "ch") == {"a": {"a": None}}


@LAW
@given(records, records, records)
def test_max_by_timestamp_is_associative(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> None:
    _assoc(MaxByTimestamp(), a, b, c)


@LAW
@given(
    st.lists(json_values, max_size=4),
    st.lists(json_values, max_size=4),
    st.lists(json_values, max_size=4) | json_values,
)
def test_append_list_is_associative(a: list[Any], b: list[Any], c: Any) -> None:
    _assoc(AppendList(), a, b, c)


@LAW
@given(
    st.lists(messages_with_id, max_size=4),
    st.lists(messages_with_id, max_size=4),
    st.lists(messages_with_id, max_size=4),
)
def test_append_messages_upserts_are_associative(a: list[Any], b: list[Any], c: list[Any]) -> None:
    reducer = AppendMessages()
    # A current value holds each id once: normalise the three histories first.
    a, b, c = (_fold(reducer, reducer.default(), x) for x in (a, b, c))
    _assoc(reducer, a, b, c)


@LAW
@given(json_values, json_values, json_values)
def test_last_write_wins_is_associative(a: Any, b: Any, c: Any) -> None:
    _assoc(LastWriteWins(), a, b, c)
