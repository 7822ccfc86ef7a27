"""plait._codec: the JSON gate every value passes on its way into state."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import json
import math
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import dataclass
from typing import Any

import pytest

from plait import NotSerializableError, ReadOnlyStateError, StateError
from plait._codec import (
    MAX_DEPTH,
    canonical,
    decode,
    decode_frozen,
    encode,
    fingerprint,
    freeze,
    freeze_trusted,
)
from plait._frozen import FrozenDict, FrozenList, FrozenView


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


class Count(int):
    pass


class Ratio(float):
    pass


@dataclass
class Point:
    x: int


def _refusal(value: Any, channel: str = "ch", node: str | None = None) -> NotSerializableError:
    with pytest.raises(NotSerializableError) as info:
        freeze(value, channel, node)
    return info.value


# -- what is accepted -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        0.5,
        -0.0,
        1e308,
        "",
        "héllo ✓",
        [],
        {},
        [1, "a", None, [2.5, {"k": [True]}]],
        {"a": {"b": {"c": [1, 2, {"d": None}]}}},
    ],
)
def test_json_data_is_accepted_and_comes_back_equal(value: Any) -> None:
    frozen = freeze(value, "ch")
    assert frozen == value
    assert decode(encode(frozen)) == value


def test_containers_come_back_frozen_all_the_way_down() -> None:
    frozen = freeze({"a": [1, {"b": [2]}]}, "ch")
    assert type(frozen) is FrozenDict
    assert type(frozen["a"]) is FrozenList
    assert type(frozen["a"][1]) is FrozenDict
    assert type(frozen["a"][1]["b"]) is FrozenList
    with pytest.raises(ReadOnlyStateError):
        frozen["a"][1]["b"].append(3)


def test_tuples_normalise_to_lists() -> None:
    frozen = freeze({"pair": (1, (2, 3))}, "ch")
    assert frozen == {"pair": [1, [2, 3]]}
    assert type(frozen["pair"]) is FrozenList
    assert type(frozen["pair"][1]) is FrozenList
    assert encode(frozen) == b'{"pair":[1,[2,3]]}'


def test_dict_subclasses_are_plain_data_underneath() -> None:
    counts: defaultdict[str, int] = defaultdict(int, {"a": 1})
    frozen = freeze({"o": OrderedDict([("x", 1)]), "d": counts}, "ch")
    assert frozen == {"o": {"x": 1}, "d": {"a": 1}}
    assert type(frozen["o"]) is FrozenDict
    assert type(frozen["d"]) is FrozenDict


def test_freezing_copies_so_later_changes_to_the_input_do_not_reach_it() -> None:
    inner = {"n": 1}
    outer = [inner, [2]]
    frozen = freeze(outer, "ch")
    inner["n"] = 99
    outer.append("late")
    outer[1].append(3)  # type: ignore[attr-defined]
    assert frozen == [{"n": 1}, [2]]


def test_already_frozen_parts_are_reused_not_copied() -> None:
    part = freeze([{"big": "x" * 100}], "ch")
    again = freeze({"wrapper": part}, "ch")
    assert again["wrapper"] is part
    assert freeze(part, "ch") is part


def test_a_read_only_view_is_json_data_frozen_as_the_values_it_shows() -> None:
    """What a node does with its state (``Send("worker", state)``, ``{"snapshot": state}``):
    the view freezes to a FrozenDict of what it shows at that moment, values shared."""
    history = freeze([{"id": "m1", "content": "hi"}], "messages")
    table: dict[str, Any] = {"messages": history, "turn": 1}
    view = FrozenView(table)
    frozen = freeze({"snapshot": view, "several": [view, (view,)]}, "ch")
    expected = {"messages": [{"id": "m1", "content": "hi"}], "turn": 1}
    assert frozen == {"snapshot": expected, "several": [expected, [expected]]}
    assert type(frozen["snapshot"]) is FrozenDict
    assert frozen["snapshot"]["messages"] is history, "the frozen values are shared, not copied"
    assert type(freeze(view, "ch")) is FrozenDict
    table["turn"] = 2  # the run's table moves on after the write
    assert frozen["snapshot"]["turn"] == 1
    assert json.loads(encode(frozen)) == {"snapshot": expected, "several": [expected, [expected]]}


def test_freeze_trusted_and_decode_frozen_give_frozen_data() -> None:
    data = decode_frozen(b'{"a":[1,{"b":2}]}')
    assert data == {"a": [1, {"b": 2}]}
    assert type(data) is FrozenDict and type(data["a"]) is FrozenList and type(data["a"][1]) is FrozenDict
    trusted = freeze_trusted([{"x": [1]}])
    assert type(trusted) is FrozenList and type(trusted[0]["x"]) is FrozenList


def test_decode_gives_mutable_data() -> None:
    data = decode('{"a": [1]}')
    data["a"].append(2)
    assert data == {"a": [1, 2]}
    assert type(data) is dict


# -- what is refused, and how the error reads ------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (dt.datetime(2024, 1, 1), "datetime"),
        (dt.date(2024, 1, 1), "date"),
        ({1, 2}, "set"),
        (frozenset({1}), "frozenset"),
        (b"bytes", "bytes"),
        (bytearray(b"x"), "bytearray"),
        (decimal.Decimal("1.5"), "Decimal"),
        (uuid.UUID(int=1), "UUID"),
        (Point(1), "Point"),
        (object(), "object"),
        (Color.RED, "Color"),
        (Level.LOW, "Level"),
        (Name("x"), "Name"),
        (Count(3), "Count"),
        (Ratio(0.5), "Ratio"),
        (1 + 2j, "complex"),
        (len, "builtin_function_or_method"),
    ],
)
def test_non_json_values_are_refused_with_their_type_named(value: Any, type_name: str) -> None:
    err = _refusal(value)
    assert err.type_name == type_name
    assert err.path == "ch"
    assert f"ch: {type_name} is not JSON data" in str(err)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused(value: float) -> None:
    err = _refusal({"score": value})
    assert err.path == "ch.score"
    assert err.type_name.startswith("float")
    assert repr(value) in str(err)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30])
def test_ints_beyond_64_bits_are_refused(value: int) -> None:
    err = _refusal([value])
    assert err.path == "ch[0]"
    assert "64-bit" in str(err)


@pytest.mark.parametrize("key", [1, 1.5, None, True, ("a", "b"), Name("k")])
def test_dict_keys_must_be_plain_str(key: Any) -> None:
    err = _refusal({"outer": {key: 1}})
    assert err.path == "ch.outer"
    assert err.type_name == f"{type(key).__name__} (used as a dict key (keys must be str))"


def test_error_names_the_channel_the_node_and_the_path_inside_the_value() -> None:
    messages = [{"role": "user"}, {}, {}, {"meta": {"when": dt.datetime(2024, 5, 1)}}]
    err = _refusal(messages, channel="messages", node="chat")
    assert isinstance(err, StateError) and isinstance(err, TypeError)
    assert err.channel == "messages"
    assert err.node == "chat"
    assert err.path == "messages[3].meta.when"
    assert str(err).startswith("messages[3].meta.when: datetime is not JSON data (written by node 'chat')")
    assert "isoformat" in str(err)  # it says how to fix it


def test_path_quotes_keys_that_are_not_identifiers() -> None:
    err = _refusal({"a b": [{"x-y": {1, 2}}]})
    assert err.path == "ch['a b'][0]['x-y']"


def test_path_is_of_the_first_bad_part() -> None:
    err = _refusal([1, [2, {"ok": 1, "bad": object()}], dt.date.today()])
    assert err.path == "ch[1][1].bad"


def test_nesting_deeper_than_the_limit_is_refused_not_a_crash_later() -> None:
    ok: Any = "leaf"
    for _ in range(MAX_DEPTH):
        ok = [ok]
    frozen = freeze(ok, "ch")
    assert fingerprint({"ch": frozen})  # encodable, with room for a checkpoint envelope
    err = _refusal([ok])
    assert "nested deeper than" in str(err)


def test_cyclic_values_are_refused_with_a_clear_error() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    err = _refusal({"a": loop})
    assert err.path.startswith("ch.a[1][1]")
    assert "cyclic" in str(err)
    selfref: dict[str, Any] = {}
    selfref["me"] = selfref
    assert "cyclic" in str(_refusal(selfref))


# -- encoding, canonical form and fingerprints ----------------------------------------------


def test_canonical_sorts_keys_at_every_level_and_has_no_whitespace() -> None:
    value = {"b": 1, "a": {"d": [1, {"z": 0, "y": 0}], "c": None}}
    assert canonical(value) == b'{"a":{"c":null,"d":[1,{"y":0,"z":0}]},"b":1}'
    assert canonical(freeze(value, "ch")) == canonical(value)


def test_encode_keeps_insertion_order_and_frozen_encodes_like_plain() -> None:
    value = {"b": [1, 2], "a": "x"}
    assert encode(value) == b'{"b":[1,2],"a":"x"}'
    assert encode(freeze(value, "ch")) == encode(value)
    assert json.loads(json.dumps(freeze(value, "ch"))) == value  # stdlib json reads them too


def test_fingerprint_ignores_key_order_and_distinguishes_json_types() -> None:
    fp = fingerprint({"a": 1, "b": [1, 2]})
    assert len(fp) == 32 and int(fp, 16) >= 0
    assert fingerprint({"b": [1, 2], "a": 1}) == fp
    assert fingerprint({"a": 1, "b": [2, 1]}) != fp  # list order matters
    assert fingerprint({"a": True}) != fingerprint({"a": 1})
    assert fingerprint({"a": 1.0}) != fingerprint({"a": 1})
    assert fingerprint({"a": None}) != fingerprint({})


def test_fingerprint_is_pinned_so_it_is_stable_across_versions_and_machines() -> None:
    # blake2b-128 of the canonical bytes; if this changes, stored fingerprints stop matching.
    assert fingerprint({"b": 2, "a": [1, "x", None]}) == fingerprint(json.loads('{"a":[1,"x",null],"b":2}'))
    import hashlib

    expected = hashlib.blake2b(b'{"a":[1,"x",null],"b":2}', digest_size=16).hexdigest()
    assert fingerprint({"b": 2, "a": [1, "x", None]}) == expected


def test_strings_orjson_cannot_encode_are_refused_at_write_time() -> None:
    err = _refusal({"k": ["ok", "half a pair \ud800"]})
    assert err.path == "ch.k[1]"
    assert "lone surrogate" in str(err)
    key_err = _refusal({"ok": {"\udc00": 1}})
    assert key_err.path == "ch.ok" and "dict key" in str(key_err)
    assert freeze("é ✓ 😀", "ch") == "é ✓ 😀"  # any real text is fine
