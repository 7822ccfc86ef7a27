"""positional_maker: the same records as the dataclass constructor, still frozen."""

from __future__ import annotations

import dataclasses

import pytest

from plait._fast_init import positional_maker
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
