"""Checkpoint records (plait.checkpoint._records): the fast body decoder agrees with the full
one on every shape, and decoded JSON is frozen all the way down."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait._codec import freeze_decoded, freeze_trusted
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint._records import RecordError, decode_body, decode_body_fields, decode_json, encode_body
from plait.checkpoint.model import Checkpoint, Task, task_id

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def _fields(data: bytes) -> Any:
    try:
        return decode_body_fields(data, "c9")
    except RecordError as exc:
        return str(exc)


def _full(data: bytes) -> Any:
    try:
        body = decode_body(data, "c9")
    except RecordError as exc:
        return str(exc)
    return body.versions, body.next_tasks, body.barriers, body.blobs, body.inline


@pytest.mark.parametrize(
    "body",
    [
        b'{"v":{"m":3},"n":[["t1","say"]],"b":{"m":"c1"}}',
        b'{"v":{},"b":{"m":"c1"},"n":[["t1","say",true,{"x":1}]]}',
        b'{"v":{},"b":{"m":"c1"},"j":{"join:x":["a","b"]}}',
        b'{"v":{},"b":{}}',
        b'{"v":{},"x":{"m":[1]}}',
        b'{"v":{},"b":{"m":"c1"},"n":null}',
        b'{"v":{},"b":{"m":"c1"},"n":5}',
        b'{"v":{},"b":{"m":"c1"},"n":[["t1"]]}',
        b'{"v":{},"b":{"m":"c1"},"n":["t1"]}',
        b'{"v":{},"b":{"m":1}}',
        b'{"v":{},"b":{"m":0}}',
        b'{"v":{"m":3,"k":1},"b":0,"n":[["t1","say"]]}',
        b'{"v":{"m":3},"b":0,"i":{"m":[null,[1]]}}',
        b'{"v":[],"b":0}',
        b'{"v":{},"b":0}',
        b'{"v":{"m":3},"b":1}',
        b'{"v":{"m":3},"b":0,"n":["say",["t2","ask"],"ask"]}',
        b'{"v":{"m":3,"k":1},"n":["say",["t2","ask"],"ask"]}',
        b'{"v":{"m":3},"i":{"m":[null,[1]]}}',
        b'{"v":{"m":3},"i":{"k":[null,[1]]}}',
        b'{"v":{}}',
        b'{"v":[]}',
        b'{"v":{"m":3},"b":null}',
        b'{"v":{"m":3},"b":{"m":"c1"},"n":["say",5]}',
        b'{"v":{},"x":{},"n":["say"]}',
        b'{"v":{"m":3},"b":false}',
        b'{"v":{"m":3},"b":0.0}',
        b'{"v":[],"b":{"m":"c1"}}',
        b'{"b":{"m":"c1"}}',
        b'{"v":{},"b":{"m":"c1"},"x":{}}',
        b"[1]",
        b"{",
    ],
)
def test_body_fields_are_what_decode_body_gives(body: bytes) -> None:
    assert _fields(body) == _full(body)


@given(st.dictionaries(st.sampled_from(["v", "b", "n", "j", "x", "z"]), json_values, max_size=5))
def test_body_fields_agree_with_decode_body_on_any_json_object(raw: dict[str, Any]) -> None:
    data = orjson.dumps(raw)
    assert _fields(data) == _full(data)


def test_a_body_with_an_empty_blob_map_reads_back() -> None:
    cp = Checkpoint(thread_id="t", id="a", parent_id=None, step=0, values={}, next_tasks=(Task(id="x", node="n"),))
    data = encode_body(cp, blobs={})
    assert decode_body_fields(data, "a") == ({}, (Task(id="x", node="n"),), {}, {}, None)
    assert decode_body(data, "a").blobs == {}


@pytest.mark.parametrize(
    ("blobs", "stored"),
    [
        # every channel, in the versions' order, written here: the map is left out
        ({"m": "c5", "k": "c5"}, None),
        # one inherited: every id stays
        ({"m": "c5", "k": "c2"}, {"m": "c5", "k": "c2"}),
        # all written here but in another order than the versions': the map keeps its order
        ({"k": "c5", "m": "c5"}, {"k": "c5", "m": "c5"}),
        # a channel with a version but no value: not every channel has a blob here
        ({"m": "c5"}, {"m": "c5"}),
        ({}, {}),
    ],
)
def test_a_blob_map_of_the_checkpoints_own_blobs_is_left_out(blobs: dict[str, str], stored: Any) -> None:
    versions = {"m": 3, "k": 1}
    cp = Checkpoint(thread_id="t", id="c5", parent_id="c2", step=0, values={}, versions=versions)
    data = encode_body(cp, blobs=blobs)
    assert orjson.loads(data).get("b") == stored
    for got in (decode_body(data, "c5").blobs, decode_body_fields(data, "c5")[3]):
        assert got == blobs and list(got or ()) == list(blobs)  # ids and order back


def test_a_blob_map_that_is_null_is_refused_not_taken_for_one_left_out() -> None:
    for decode in (decode_body, decode_body_fields):
        with pytest.raises(RecordError, match="either a blob map or values"):
            decode(b'{"v":{"m":3},"b":null}', "c5")


def test_a_body_stored_before_schema_12_reads_as_it_did() -> None:
    data = b'{"v":{"m":3},"n":[["t1","say"]],"b":{"m":"c5"}}'
    assert decode_body_fields(data, "c5")[3] == {"m": "c5"} == decode_body(data, "c5").blobs
    assert decode_body(data, "c7").blobs == {"m": "c5"}  # an id is never rewritten
    assert decode_body(data, "c5").next_tasks == (Task(id="t1", node="say"),) == decode_body_fields(data, "c5")[1]


@given(json_values)
def test_decoded_json_is_frozen_all_the_way_down_and_equal(value: Any) -> None:
    data = orjson.dumps(value)
    for got in (decode_json(data), freeze_decoded(orjson.loads(data))):
        assert orjson.dumps(got) == data and got == freeze_trusted(orjson.loads(data))
        stack = [got]
        while stack:
            item = stack.pop()
            assert type(item) not in (list, dict)
            if isinstance(item, FrozenDict):
                stack.extend(item.values())
            elif isinstance(item, FrozenList):
                stack.extend(item)


def test_a_planned_task_with_the_id_the_engine_gives_it_is_stored_by_its_node() -> None:
    derived = Task(id=task_id("c5", "say", 0), node="say")
    other = Task(id="renamed", node="say")  # e.g. a branch's own ids (time travel)
    sent = Task(id=task_id("c5", "map", 0), node="map", send=True, arg={"k": 1})
    cp = Checkpoint(
        thread_id="t", id="c5", parent_id=None, step=0, values={}, next_tasks=(derived, other, sent, derived)
    )
    data = encode_body(cp, blobs={})
    assert orjson.loads(data)["n"] == ["say", ["renamed", "say"], sent.to_json(), "say"]
    for got in (decode_body(data, "c5").next_tasks, decode_body_fields(data, "c5")[1]):
        assert got == (derived, other, sent, derived)
    # The id is the checkpoint's to derive: the same bytes read as another checkpoint's name other tasks.
    assert decode_body(data, "c6").next_tasks[0].id == task_id("c6", "say", 0) != derived.id
    # Values stored inline (the file backend's records) keep every task whole.
    assert orjson.loads(encode_body(cp))["n"][0] == derived.to_json()
