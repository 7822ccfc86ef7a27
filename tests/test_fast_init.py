"""positional_maker: the same records as the dataclass constructor, still frozen."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from plait._fast_init import given_maker, positional_maker
from plait._frozen import FrozenDict
from plait.checkpoint.model import Checkpoint, PendingWrite, Task
from plait.graph.records import ThreadState


def test_a_made_checkpoint_equals_the_constructed_one_and_stays_frozen() -> None:
    make = positional_maker(Checkpoint)
    args = {
        "thread_id": "t",
        "namespace": "ns",
        "id": "c2",
        "parent_id": "c1",
        "step": 2,
        "values": FrozenDict({"a": 1}),
        "versions": FrozenDict({"a": 2}),
        "next_tasks": (Task(id="x", node="n"),),
        "barriers": FrozenDict(),
        "metadata": FrozenDict({"source": "loop"}),
        "created_at": 12.5,
        "pending_writes": (PendingWrite(task_id="x", kind="result"),),
    }
    made = make(*(args[f.name] for f in dataclasses.fields(Checkpoint)))
    assert type(made) is Checkpoint
    assert made == Checkpoint(**args)  # type: ignore[arg-type]
    assert hash(made.id) == hash("c2") and made.version == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.step = 3  # type: ignore[misc]


def test_every_field_must_be_given_in_order() -> None:
    make = positional_maker(Task)
    assert make("i", "n", True, [1]) == Task(id="i", node="n", send=True, arg=[1])
    with pytest.raises(TypeError):
        make("i", "n")


def test_thread_state_of_uses_it_and_gives_the_same_record() -> None:
    cp = Checkpoint(thread_id="t", id="c", parent_id=None, step=0, values=FrozenDict({"a": 1}))
    st = ThreadState.of(cp)
    assert type(st) is ThreadState and st.checkpoint_id == "c" and st.values == {"a": 1} and st.next == ()


def test_a_class_that_is_not_a_slotted_dataclass_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        a: int

    with pytest.raises(TypeError, match="slotted dataclass"):
        positional_maker(Plain)
    with pytest.raises(TypeError, match="slotted dataclass"):
        positional_maker(int)


@dataclasses.dataclass(kw_only=True)
class _Record:
    name: str
    size: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    seen: set[str] = dataclasses.field(default_factory=set)
    kind: tuple[str, ...] = ("a",)
    note: str | None = None


def test_given_maker_sets_the_given_fields_and_defaults_the_rest() -> None:
    make = given_maker(_Record, ("size", "name"))
    made = make(3, "x")
    assert type(made) is _Record and made == _Record(name="x", size=3)
    assert list(vars(made)) == [f.name for f in dataclasses.fields(_Record)], "set in field order"
    other = make(0, "y")
    assert other.tags is not made.tags and other.meta is not made.meta and other.seen is not made.seen


def test_given_maker_refuses_what_it_could_not_make_as_the_constructor_would() -> None:
    with pytest.raises(TypeError, match="has no default"):
        given_maker(_Record, ("size",))
    with pytest.raises(TypeError, match="no field"):
        given_maker(_Record, ("name", "colour"))

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        a: int

    @dataclasses.dataclass
    class Checked:
        a: int

        def __post_init__(self) -> None:
            assert self.a >= 0

    for cls in (Frozen, Checked, int):
        with pytest.raises(TypeError, match="mutable dataclass"):
            given_maker(cls, ("a",))
