"""The commit rule's one exception: a record marked ``checked`` (a run's step checkpoint,
made by the engine from values checked before the run's first write) is not checked again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from plait.checkpoint import Checkpoint, CheckpointWrite
from plait.checkpoint._validate import check_commit
from plait.errors import InvalidIdError, InvalidRecordError


def _checkpoint(**fields: object) -> Checkpoint:
    cp = Checkpoint(thread_id="t", namespace="", id="0" * 16, parent_id=None, step=0, values={}, versions={})
    return replace(cp, **fields)  # type: ignore[arg-type]  # wrong types on purpose


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"versions": {"n": "1"}}, InvalidRecordError),
        ({"step": "0"}, InvalidRecordError),
        ({"metadata": {"source": 3}}, InvalidRecordError),
        ({"thread_id": "bad\x00id"}, InvalidIdError),
    ],
)
def test_an_unchecked_record_is_refused_and_a_checked_one_is_taken_as_checked(
    fields: dict[str, object], error: type[Exception]
) -> None:
    cp = _checkpoint(**fields)
    with pytest.raises(error):
        check_commit([CheckpointWrite(checkpoint=cp, changed=frozenset())], [])
    check_commit([CheckpointWrite(checkpoint=cp, changed=frozenset(), checked=True)], [])


def test_records_are_unchecked_unless_said() -> None:
    assert CheckpointWrite(checkpoint=_checkpoint(), changed=frozenset()).checked is False
