"""Log correlation: a record of plait's loggers made while a span is current names that span."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import plait
from plait import END, START, Graph, MemoryCheckpointer

from ._tree import Tree


class S(TypedDict):
    n: int


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept() -> Iterator[Keep]:
    logger = logging.getLogger("plait.run")
    handler = Keep()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _logging_app() -> Any:
    def talk(state: Any) -> Any:
        logging.getLogger("plait.run").info("inside the node")
        return {"n": 1}

    return Graph(S).add_node("talk", talk).add_edge(START, "talk").add_edge("talk", END).compile(MemoryCheckpointer())


def test_a_record_names_the_span_it_was_logged_in(exporter: InMemorySpanExporter, kept: Keep) -> None:
    _logging_app().invoke({"n": 0}, thread_id="l")
    task = Tree(exporter.get_finished_spans()).one("plait.task talk")
    (record,) = kept.records
    assert record.otelTraceID == format(task.context.trace_id, "032x")  # type: ignore[attr-defined]
    assert record.otelSpanID == format(task.context.span_id, "016x")  # type: ignore[attr-defined]
    logging.getLogger("plait.run").info("outside any span")
    assert kept.records[-1].otelTraceID == "0"  # type: ignore[attr-defined]


def test_the_filter_is_installed_once_and_removed_by_uninstrument(exporter: InMemorySpanExporter, kept: Keep) -> None:
    logger = logging.getLogger("plait.run")
    plait.instrument()
    assert len(logger.filters) == 1
    plait.uninstrument()
    assert logger.filters == []
    _logging_app().invoke({"n": 0}, thread_id="l2")
    (record,) = kept.records
    assert not hasattr(record, "otelTraceID")
