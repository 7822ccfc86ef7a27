"""Pydantic models and dataclasses as the state: ``Graph(Model)``.

The first tests port LangGraph's own (libs/langgraph/tests/test_pydantic.py, MIT) to plait's
API; where plait differs on purpose (the values returned are the JSON form of the validated
state, not the raw input), the test says so.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import ipaddress
import operator
import pathlib
import re
import uuid
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import (
    BaseModel,
    ByteSize,
    Field,
    SecretStr,
    confloat,
    conint,
    conlist,
    constr,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass

from plait import (
    END,
    START,
    AppendList,
    Checkpointer,
    Command,
    Graph,
    GraphError,
    SchemaError,
    Send,
    StateValidationError,
    interrupt,
)

# -- LangGraph's cases -----------------------------------------------------------------------


class NestedModel(BaseModel):
    value: int
    name: str


class RecursiveModel(BaseModel):
    value: str
    child: Optional[RecursiveModel] = None  # noqa: UP045 - LangGraph's spelling, kept


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meow: str


class Dog(BaseModel):
    pet_type: Literal["dog"]
    bark: str


class Person(BaseModel):
    id: str
    name: str
    friends: list[str] = Field(default_factory=list)


class UserRole(Enum):
    ADMIN = "admin"
    USER = "user"


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]


class RichState(BaseModel):
    top_level: str
    auuid: uuid.UUID
    nested: NestedModel
    optional_nested: Annotated[NestedModel | None, lambda x, y: y, "Foo"]
    dict_nested: dict[str, NestedModel]
    simple_str_list: list[str]
    # LangGraph's case adds the reducer ``lambda x, y: (x or []) + [y]``, whose folded value
    # (a list in a list) its own type refuses; plait reads the stored value back as the type
    list_nested: dict | list[dict[str, NestedModel]]  # type: ignore[type-arg]
    tuple_nested: tuple[str, NestedModel]
    tuple_list_nested: list[tuple[int, NestedModel]]
    complex_tuple: tuple[str, dict[str, tuple[int, NestedModel]]]
    recursive: RecursiveModel
    pet: Cat | Dog
    people: dict[str, Person]
    ip_address: ipaddress.IPv4Address
    ip_address_v6: ipaddress.IPv6Address
    amount: decimal.Decimal
    file_path: pathlib.Path
    timestamp: datetime.datetime
    date_only: datetime.date
    time_only: datetime.time
    duration: datetime.timedelta
    immutable_set: frozenset[int]
    binary_data: bytes
    pattern: re.Pattern  # type: ignore[type-arg]
    file_size: ByteSize
    positive_value: PositiveInt
    non_negative: NonNegativeFloat
    limited_string: constr(min_length=3, max_length=10)  # type: ignore[valid-type]
    bounded_int: conint(ge=10, le=100)  # type: ignore[valid-type]
    restricted_float: confloat(gt=0, lt=1)  # type: ignore[valid-type]
    required_list: conlist(item_type=int, min_length=2, max_length=5)  # type: ignore[valid-type]
    role: UserRole
    status: Literal["active", "inactive", "pending"]
    validated_age: Annotated[int, Field(gt=0, lt=120)]
    decimal_list: list[decimal.Decimal]
    id_tuple: tuple[uuid.UUID, uuid.UUID]


RICH_INPUT: dict[str, Any] = {
    "top_level": "initial",
    "auuid": str(uuid.uuid4()),
    "nested": {"value": 42, "name": "test"},
    "optional_nested": {"value": 10, "name": "optional"},
    "dict_nested": {"a": {"value": 5, "name": "a"}},
    "list_nested": [{"a": {"value": 6, "name": "b"}}],
    "tuple_nested": ["tuple-key", {"value": 7, "name": "tuple-value"}],
    "tuple_list_nested": [[1, {"value": 8, "name": "tuple-in-list"}]],
    "simple_str_list": ["siss", "boom", "bah"],
    "complex_tuple": ["complex", {"nested": [9, {"value": 10, "name": "deep"}]}],
    "recursive": {"value": "parent", "child": {"value": "child", "child": None}},
    "pet": {"pet_type": "cat", "meow": "meow!"},
    "people": {
        "1": {"id": "1", "name": "Alice", "friends": ["2", "3"]},
        "2": {"id": "2", "name": "Bob", "friends": ["1"]},
        "3": {"id": "3", "name": "Charlie", "friends": ["1", "2"]},
    },
    "ip_address": "192.168.1.1",
    "ip_address_v6": "2001:db8::1",
    "amount": "123.45",
    "file_path": "/tmp/test.txt",
    "timestamp": "2025-04-07T10:58:04",
    "date_only": "2025-04-07",
    "time_only": "10:58:04",
    "duration": 3600,
    "immutable_set": [1, 2, 3, 4],
    "binary_data": b"hello world",
    "pattern": "^test$",
    "file_size": 1024,
    "positive_value": 42,
    "non_negative": 0.0,
    "limited_string": "test",
    "bounded_int": 50,
    "restricted_float": 0.5,
    "required_list": [10, 20, 30],
    "role": "admin",
    "status": "active",
    "validated_age": 30,
    "decimal_list": ["10.5", "20.75", "30.25"],
    "id_tuple": [str(uuid.uuid4()), str(uuid.uuid4())],
}


def test_nested_pydantic_models_reach_the_node_as_their_types() -> None:
    expected = RichState(**RICH_INPUT)
    update = {"top_level": "updated", "nested": {"value": 100, "name": "updated"}}

    def node_fn(state: RichState) -> dict[str, Any]:
        assert isinstance(state, RichState) and state == expected
        assert isinstance(state.auuid, uuid.UUID)
        assert isinstance(state.ip_address, ipaddress.IPv4Address)
        assert isinstance(state.ip_address_v6, ipaddress.IPv6Address)
        assert isinstance(state.amount, decimal.Decimal)
        assert isinstance(state.file_path, pathlib.Path)
        assert isinstance(state.timestamp, datetime.datetime)
        assert isinstance(state.date_only, datetime.date)
        assert isinstance(state.time_only, datetime.time)
        assert isinstance(state.duration, datetime.timedelta)
        assert isinstance(state.immutable_set, frozenset)
        assert isinstance(state.binary_data, bytes)
        assert isinstance(state.pattern, re.Pattern)
        assert state.role == UserRole.ADMIN and isinstance(state.pet, Cat)
        assert isinstance(state.nested, NestedModel) and isinstance(state.recursive.child, RecursiveModel)
        return update

    g = Graph(RichState)
    g.add_node("process", node_fn).add_edge(START, "process").add_edge("process", END)
    app = g.compile()
    result = app.invoke(dict(RICH_INPUT))
    # plait returns the validated state's JSON form (LangGraph returns the raw input values)
    assert result == {**expected.model_dump(mode="json"), **update}
    assert app.invoke(dict(RICH_INPUT), output_model=True) == expected.model_copy(
        update={"top_level": "updated", "nested": NestedModel(value=100, name="updated")}
    )


class ValidatedState(BaseModel):
    name: str
    text: str = ""
    only_root: int = 13

    @field_validator("name", mode="after")
    @classmethod
    def validate_name(cls, value: str) -> str:
        if value[0].islower():
            raise ValueError("Name must start with a capital letter")
        return "Validated " + value

    @model_validator(mode="before")
    @classmethod
    def validate_amodel(cls, values: Any) -> Any:
        return values | {"only_root": 392} if isinstance(values, dict) else values


def test_a_transforming_validator_runs_once_per_write() -> None:
    seen: list[ValidatedState] = []

    def process(state: ValidatedState) -> dict[str, Any]:
        seen.append(state)
        assert state == ValidatedState.model_validate({"name": "John"})
        return {"text": "Hello, " + state.name + "!"}

    def again(state: ValidatedState) -> dict[str, Any]:
        seen.append(state)  # read back a second time: still validated once
        return {}

    g = Graph(ValidatedState)
    g.add_node("process", process).add_node("again", again)
    g.add_edge(START, "process").add_edge("process", "again").add_edge("again", END)
    res = g.compile().invoke({"name": "John"})
    assert res == {"name": "Validated John", "text": "Hello, Validated John!", "only_root": 392}
    assert [s.name for s in seen] == ["Validated John", "Validated John"]


# -- validation of every write -------------------------------------------------------------


class Counter(BaseModel):
    name: str
    count: int = 0
    log: Annotated[list[str], operator.add] = Field(default_factory=list)


def _graph(state: type, *nodes: tuple[str, Callable[..., Any]], **kw: Any) -> Graph:
    g = Graph(state, **kw)
    prev = START
    for name, fn in nodes:
        g.add_node(name, fn).add_edge(prev, name)
        prev = name
    g.add_edge(prev, END)
    return g


def test_a_bad_update_names_the_node_and_the_field_and_writes_nothing(make_saver: Callable[..., Checkpointer]) -> None:
    app = _graph(Counter, ("good", lambda s: {"count": 1}), ("bad", lambda s: {"count": "many", "name": "x"})).compile(
        make_saver()
    )
    with pytest.raises(StateValidationError) as err:
        app.invoke({"name": "n"}, thread_id="t")
    assert err.value.node == "bad" and err.value.field == "count"
    assert "'bad'" in str(err.value) and "Counter.count" in str(err.value) and "valid integer" in str(err.value)
    assert app.get_state("t").values == {"name": "n", "count": 1, "log": []}


def test_the_input_is_validated_and_a_missing_required_field_named() -> None:
    app = _graph(Counter, ("n", lambda s: {})).compile()
    with pytest.raises(StateValidationError, match="name"):
        app.invoke({"count": 2})
    with pytest.raises(StateValidationError, match="count"):
        app.invoke({"name": "a", "count": "x"})


def test_a_node_gets_the_model_and_may_return_one(make_saver: Callable[..., Checkpointer]) -> None:
    def first(state: Counter) -> Counter:
        assert isinstance(state, Counter)
        state.count += 1
        state.log = ["first"]
        return state  # writes what it assigned only: name is not written again

    def second(state: Counter) -> Counter:
        return Counter(name=state.name, log=["second"])  # a fresh instance: the fields it was given

    app = _graph(Counter, ("first", first), ("second", second)).compile(make_saver())
    out = app.invoke({"name": "n"}, thread_id="t")
    assert out == {"name": "n", "count": 1, "log": ["first", "second"]}
    assert app.invoke(None, thread_id="t", output_model=True) == Counter(name="n", count=1, log=["first", "second"])


def test_a_router_reads_the_model() -> None:
    g = Graph(Counter)
    g.add_node("a", lambda s: {"count": s.count + 1}).add_node("b", lambda s: {"log": ["b"]})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "b" if isinstance(s, Counter) and s.count == 1 else END)
    g.add_edge("b", END)
    assert g.compile().invoke({"name": "n"})["log"] == ["b"]


def test_update_state_is_validated_and_refused_writes_nothing(make_saver: Callable[..., Checkpointer]) -> None:
    app = _graph(Counter, ("n", lambda s: {})).compile(make_saver())
    app.invoke({"name": "n"}, thread_id="t")
    before = app.get_state("t")
    with pytest.raises(StateValidationError) as err:
        app.update_state("t", {"count": "x"})
    assert err.value.field == "count" and "update_state" in str(err.value)
    assert app.get_state("t").checkpoint_id == before.checkpoint_id
    app.update_state("t", {"count": "7"})  # coerced by the model, stored as JSON
    assert app.get_state("t").values["count"] == 7


class Stamped(BaseModel):
    when: datetime.datetime
    ids: list[uuid.UUID] = Field(default_factory=list)
    amount: decimal.Decimal = decimal.Decimal("0")


def test_model_state_is_stored_as_json_and_a_resumed_run_gets_the_model(
    make_saver: Callable[..., Checkpointer],
) -> None:
    """Stored and read back on every backend: the values in the store are JSON data (the
    model's JSON form), and the node resumed after an interrupt gets the model instance."""
    got: list[Stamped] = []
    one = uuid.uuid4()

    def ask(state: Stamped) -> dict[str, Any]:
        answer = interrupt("amount?")
        got.append(state)
        return {"amount": decimal.Decimal(answer), "ids": [one]}

    saver = make_saver()
    app = _graph(Stamped, ("ask", ask)).compile(saver)
    when = datetime.datetime(2025, 1, 2, 3, 4, 5)
    paused = app.invoke({"when": when}, thread_id="t")
    assert "__interrupt__" in paused
    assert app.get_state("t").values == {"when": "2025-01-02T03:04:05", "ids": [], "amount": "0"}
    done = app.invoke(Command(resume="12.50"), thread_id="t", output_model=True)
    assert done == Stamped(when=when, ids=[one], amount=decimal.Decimal("12.50"))
    assert isinstance(got[0], Stamped) and got[0].when == when
    assert app.get_state("t").values == {"when": "2025-01-02T03:04:05", "ids": [str(one)], "amount": "12.50"}


# -- defaults, reducers, schemas -------------------------------------------------------------


class WithDefaults(BaseModel):
    q: str
    tags: Annotated[list[str], AppendList()] = Field(default_factory=list)
    made: str = Field(default_factory=lambda: uuid.uuid4().hex)
    level: int = 3


def test_defaults_and_default_factories_and_reducers() -> None:
    g = _graph(WithDefaults, ("n", lambda s: {"tags": "one"}), ("m", lambda s: {"tags": ["two", "three"]}))
    assert g.schema.keys == ("q", "tags", "made", "level")
    app = g.compile()
    a, b = app.invoke({"q": "x"}), app.invoke({"q": "y"})
    assert a["tags"] == ["one", "two", "three"] and a["level"] == 3
    assert len(a["made"]) == 32 and a["made"] != b["made"]  # the factory runs per thread


class In(BaseModel):
    q: str


class Out(BaseModel):
    answer: str


class Whole(BaseModel):
    q: str
    scratch: str = ""
    answer: str = ""


def test_input_and_output_schemas_filter_what_goes_in_and_comes_out() -> None:
    g = _graph(Whole, ("n", lambda s: {"scratch": "s", "answer": s.q.upper()}), input_schema=In, output_schema=Out)
    app = g.compile()
    assert app.invoke({"q": "hi", "answer": "ignored"}) == {"answer": "HI"}
    assert app.invoke(In(q="yo"), output_model=True) == Out(answer="YO")
    with pytest.raises(GraphError, match="'nope'"):
        Graph(Whole, output_schema=type("Bad", (BaseModel,), {"__annotations__": {"nope": int}}))


def test_the_output_schema_filters_invoke_not_the_values_stream() -> None:
    # as in LangGraph (checked against langgraph 1.2): `values` items are the whole state
    g = _graph(Whole, ("n", lambda s: {"scratch": "s", "answer": s.q.upper()}), output_schema=Out)
    app = g.compile()
    last = list(app.stream({"q": "hi"}, mode="values"))[-1]
    assert last == {"q": "hi", "scratch": "s", "answer": "HI"}
    updates = list(app.stream({"q": "hi"}, mode="updates"))  # a node's update is what it wrote
    assert updates == [{"n": {"scratch": "s", "answer": "HI"}}]


def test_output_model_needs_a_model_state() -> None:
    from typing import TypedDict

    class S(TypedDict):
        a: int

    app = _graph(S, ("n", lambda s: {})).compile()
    with pytest.raises(GraphError, match="output_model"):
        app.invoke({"a": 1}, output_model=True)


def test_a_secret_field_is_refused_at_declaration() -> None:
    class S(BaseModel):
        key: SecretStr

    with pytest.raises(SchemaError, match="SecretStr"):
        Graph(S)


# -- dataclasses ------------------------------------------------------------------------------


@dataclasses.dataclass
class DcState:
    topic: str
    notes: Annotated[list[str], operator.add] = dataclasses.field(default_factory=list)
    count: int = 0


def test_a_dataclass_state_is_checked_as_json_data(make_saver: Callable[..., Checkpointer]) -> None:
    def node(state: DcState) -> dict[str, Any]:
        assert isinstance(state, DcState)
        return {"notes": [state.topic], "count": state.count + 1}

    app = _graph(DcState, ("node", node)).compile(make_saver())
    assert app.invoke({"topic": "t"}, thread_id="t") == {"topic": "t", "notes": ["t"], "count": 1}
    assert app.invoke(None, thread_id="t", output_model=True) == DcState(topic="t", notes=["t"], count=1)
    with pytest.raises(StateValidationError, match="topic"):
        app.invoke({"count": 1}, thread_id="u")
    bad = _graph(DcState, ("node", lambda s: {"count": datetime.date.today()})).compile()
    with pytest.raises(Exception, match="not JSON data"):
        bad.invoke({"topic": "t"})


@pydantic_dataclass
class PdcState:
    n: int
    label: str = "x"


def test_a_pydantic_dataclass_is_validated_as_a_model() -> None:
    app = _graph(PdcState, ("node", lambda s: {"n": s.n + 1, "label": "y"})).compile()
    assert app.invoke({"n": "1"}) == {"n": 2, "label": "y"}
    bad = _graph(PdcState, ("node", lambda s: {"n": "lots"})).compile()
    with pytest.raises(StateValidationError, match="n"):
        bad.invoke({"n": 1})


class Job(BaseModel):
    subject: str
    rating: int = 0


class Jokes(BaseModel):
    subjects: list[str] = []
    jokes: Annotated[list[str], operator.add] = []


def _jokes_graph(send: Callable[[str], Any], checkpointer: Checkpointer | None = None) -> Any:
    def fan(state: Jokes) -> list[Send]:
        return [Send("joke", send(s)) for s in state.subjects]

    def joke(job: Job) -> dict[str, Any]:
        assert isinstance(job, Job)
        return {"jokes": [f"{job.subject} ({job.rating})"]}

    g = Graph(Jokes).add_node("joke", joke)
    g.add_conditional_edges(START, fan, ["joke"])
    return g.add_edge("joke", END).compile(checkpointer=checkpointer)


def test_a_send_carries_a_model_and_the_node_gets_its_annotated_class(make_saver: Callable[..., Checkpointer]) -> None:
    """LangGraph's map-reduce sends ``Send("joke", {"subject": s})`` (or a model instance) to a
    node annotated with its own class: the argument is stored as JSON and the node gets the
    class it names, whichever was sent."""
    by_model = _jokes_graph(lambda s: Job(subject=s, rating=len(s)), make_saver())
    assert by_model.invoke({"subjects": ["cats", "owls!"]}, thread_id="t")["jokes"] == ["cats (4)", "owls! (5)"]
    by_dict = _jokes_graph(lambda s: {"subject": s})
    assert by_dict.invoke({"subjects": ["cats"]})["jokes"] == ["cats (0)"]


def test_a_send_the_nodes_class_refuses_fails_where_it_is_sent() -> None:
    app = _jokes_graph(lambda s: {"subject": s, "rating": "high"})
    with pytest.raises(
        StateValidationError, match=r"argument of Send\('joke'\) from '__start__'.*Job\.rating"
    ) as caught:
        app.invoke({"subjects": ["cats"]})
    assert caught.value.field == "rating"
