"""``--otel``'s setup (plait.tracing.export): an SDK provider built from the OTEL_* variables,
its spans posted over OTLP/HTTP to a receiver on 127.0.0.1 and read back from the protobuf."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel-export extra")

from plait import END, START, Graph, MemoryCheckpointer
from plait.errors import ArgumentError, TracingUnavailableError
from plait.tracing import is_instrumented, uninstrument
from plait.tracing.export import export_from_env

from ._otlp import Receiver, Span, otlp_receiver

VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
)


class S(TypedDict):
    log: list[str]


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A receiver, and an environment with none of the OTEL_* variables of the machine's."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with otlp_receiver() as got:
        yield got
    uninstrument()


def _app() -> Any:
    def fetch(state: S) -> Any:
        return {"log": [*state["log"], "fetched"]}

    def write(state: S) -> Any:
        return {"log": [*state["log"], "written"]}

    graph = Graph(S).add_node("fetch", fetch).add_node("write", write)
    graph.add_edge(START, "fetch").add_edge("fetch", "write").add_edge("write", END)
    return graph.compile(MemoryCheckpointer(), name="pipeline")


def _by_id(spans: list[Span]) -> dict[str, Span]:
    return {s.span_id: s for s in spans}


def test_a_run_is_posted_as_otlp_protobuf_with_its_tree_and_resource(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.url}/v1/traces")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=agents")
    sending = export_from_env("plait-test", set_global=False)
    assert sending.said == f"traces: OTLP/HTTP to {receiver.url}/v1/traces, as service plait-test"
    assert is_instrumented()
    assert _app().invoke({"log": []}, thread_id="otlp-1")["log"] == ["fetched", "written"]
    sending.shutdown()  # the batch still queued is sent before it returns
    assert not is_instrumented()

    spans = receiver.spans
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    (run,) = [s for s in spans if s.name == "plait.run"]
    assert run.parent_id == ""
    assert run.attributes["plait.thread_id"] == "otlp-1"
    assert run.attributes["plait.graph.name"] == "pipeline"
    assert run.attributes["plait.status"] == "done"
    steps = [s for s in spans if s.name == "plait.step"]
    assert steps and all(s.parent_id == run.span_id for s in steps)
    ids = _by_id(spans)
    for node in ("fetch", "write"):
        (task,) = [s for s in spans if s.name == f"plait.task {node}"]
        assert ids[task.parent_id].name == "plait.step"
        assert task.attributes["plait.node"] == node and task.attributes["plait.thread_id"] == "otlp-1"
    assert {s.trace_id for s in spans} == {run.trace_id}
    resource = run.resource
    assert resource["service.name"] == "plait-test"
    assert resource["deployment.environment"] == "test" and resource["team"] == "agents"
    assert resource["telemetry.sdk.name"] == "opentelemetry"


def test_otel_service_name_and_the_base_endpoint_are_honoured(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url + "/")  # the signal's path is added
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-agent")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    sending = export_from_env("plait-worker", set_global=False)
    assert sending.said == f"traces: OTLP/HTTP to {receiver.url}/v1/traces, as service billing-agent"
    _app().invoke({"log": []}, thread_id="otlp-2")
    sending.shutdown()
    runs = [s for s in receiver.spans if s.name == "plait.run"]
    assert [r.resource["service.name"] for r in runs] == ["billing-agent"]


def test_a_service_name_in_the_resource_attributes_is_kept(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    sending = export_from_env("plait-serve", set_global=False)
    sending.shutdown()
    assert sending.said.endswith("as service from-attributes")


def test_none_and_a_disabled_sdk_send_nothing(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    sending = export_from_env("plait-test", set_global=False)
    assert sending.said == "traces: none sent (OTEL_TRACES_EXPORTER is none)"
    _app().invoke({"log": []}, thread_id="otlp-3")
    sending.shutdown()

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    sending = export_from_env("plait-test", set_global=False)
    assert sending.said == "traces: none sent (OTEL_SDK_DISABLED is true)"
    assert not is_instrumented()
    _app().invoke({"log": []}, thread_id="otlp-4")
    sending.shutdown()
    assert receiver.spans == []


def test_the_console_exporter_prints_the_spans(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    sending = export_from_env("plait-test", set_global=False)
    assert sending.said == "traces: the console, as service plait-test"
    _app().invoke({"log": []}, thread_id="otlp-5")
    sending.shutdown()
    assert '"name": "plait.run"' in capfd.readouterr().out


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("OTEL_TRACES_EXPORTER", "otlp,zipkin", "names zipkin, which --otel does not send to"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "not gRPC's 4317"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "is 'http/json'"),
    ],
)
def test_an_exporter_or_protocol_it_does_not_ship_is_refused(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ArgumentError, match=said) as raised:
        export_from_env("plait-test", set_global=False)
    assert raised.value.option == variable
    assert not is_instrumented()


def test_without_the_exporter_it_says_which_extra_to_install(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(TracingUnavailableError) as raised:
        export_from_env("plait-test", set_global=False)
    assert raised.value.export
    assert "pip install 'plait[otel-export]'" in str(raised.value) and "--otel" in str(raised.value)
    assert isinstance(raised.value, ImportError)
    assert not is_instrumented()
