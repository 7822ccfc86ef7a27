"""``--otel`` of ``plait serve`` and ``plait worker``: real processes posting their runs' spans
over OTLP/HTTP to a receiver on 127.0.0.1, the last ones sent when SIGTERM stops them, and a
missing extra said in one line before anything is created."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..tracing._otlp import Receiver, Span, otlp_receiver
from ._cli_support import Cli

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel-export extra")

AGENT = """
from plait import END, START, Graph, MessagesState


def reply(state):
    return {"messages": [{"role": "assistant", "content": "echo: " + state["messages"][-1]["content"]}]}


graph = Graph(MessagesState)
graph.add_node("reply", reply)
graph.add_edge(START, "reply").add_edge("reply", END)
"""

NO_SDK = 'import sys\nsys.modules["opentelemetry.sdk"] = None  # as if the otel-export extra were not installed\n'


def _otel_env(receiver: Receiver, **more: str) -> dict[str, str]:
    """The receiver as the OTLP endpoint, and a batch delay no run outlasts: what the receiver
    gets, it gets when the process stops (SIGTERM) and sends the queued spans."""
    unset = ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED")
    base = dict.fromkeys((*unset, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"), "")  # "": unset
    # a batch no run fills either (the server's own request spans count: /ok is polled while it starts)
    batch = {"OTEL_BSP_SCHEDULE_DELAY": "600000", "OTEL_BSP_MAX_QUEUE_SIZE": "100000"}
    batch["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] = "100000"
    return base | {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url} | batch | more


def _check_tree(spans: list[Span], thread_id: str, service: str) -> None:
    (run,) = [s for s in spans if s.name == "plait.run" and s.attributes.get("plait.thread_id") == thread_id]
    assert run.attributes["plait.status"] == "done"
    if run.parent_id:  # the server's request span (a FastAPI that traces its requests, with --otel's provider)
        (parent,) = [s for s in spans if s.span_id == run.parent_id]
        assert not parent.name.startswith("plait.") and parent.trace_id == run.trace_id
    assert run.resource["service.name"] == service
    mine = [s for s in spans if s.trace_id == run.trace_id]
    steps = {s.span_id for s in mine if s.name == "plait.step" and s.parent_id == run.span_id}
    (task,) = [s for s in mine if s.name == "plait.task reply"]
    assert task.parent_id in steps and task.attributes["plait.thread_id"] == thread_id


def test_serve_otel_sends_the_runs_spans_and_flushes_them_on_sigterm(cli: Cli) -> None:
    langgraph_sdk = pytest.importorskip("langgraph_sdk")
    from .test_serve import serving

    cli.write("agent.py", AGENT)
    with otlp_receiver() as receiver:
        args = ("--otel", "--db", "app.db", "--graph", "agent=agent.py:graph")
        with serving(cli, *args, env=_otel_env(receiver)) as s:
            client = langgraph_sdk.get_sync_client(url=s.url)
            try:
                client.threads.create(thread_id="traced")
                out = client.runs.wait("traced", "agent", input={"messages": [{"role": "user", "content": "hi"}]})
            finally:
                client.close()
            assert isinstance(out, dict) and out["messages"][-1]["content"] == "echo: hi"
            assert receiver.spans == []  # still in the batch: the next 10 minutes' export, or the stop's
            s.proc.send_signal(signal.SIGTERM)
            stdout, err = s.proc.communicate(timeout=60)
            assert s.proc.returncode == 0, err
        assert f"traces: OTLP/HTTP to {receiver.url}/v1/traces, as service plait-serve" in stdout.splitlines()
        assert stdout.splitlines()[0].startswith("plait serve: http://127.0.0.1:")  # its URL stays first
        _check_tree(receiver.spans, "traced", "plait-serve")


@pytest.mark.postgres
def test_worker_otel_sends_a_queued_runs_spans_and_flushes_them_on_sigterm(
    postgres_dsn: str, postgres_schema: str, tmp_path: Path
) -> None:
    from plait.runs import Runs

    from ..runs import _run_flows as flows
    from ..runs._runs_support import plait_worker, started, wait_for

    runs = Runs(postgres_dsn, schema=postgres_schema)
    runs.migrate()
    runs.close()
    with otlp_receiver() as receiver:
        env = _otel_env(receiver, OTEL_SERVICE_NAME="billing-worker", OTEL_BSP_SCHEDULE_DELAY="50")
        proc = plait_worker(postgres_dsn, postgres_schema, args=("--otel",), env=env, log=tmp_path / "worker.log")
        try:
            wait_for(lambda: started(proc.log) or proc.poll() is not None, 60, "the worker to start")
            assert proc.poll() is None, proc.log.read_text()
            with Runs(postgres_dsn, schema=postgres_schema) as runs:
                run_id = runs.submit(flows.name("single"), {"log": []}, thread_id="otel-worker")
                assert runs.join(run_id, timeout=60).status == "success"
            # sent by the batch's own schedule, while the worker still runs
            spans = receiver.wait(lambda got: any(s.name == "plait.run" for s in got))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, proc.log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        (run,) = [s for s in spans if s.name == "plait.run"]
        assert run.attributes["plait.thread_id"] == "otel-worker"
        assert run.resource["service.name"] == "billing-worker"
        assert f"traces: OTLP/HTTP to {receiver.url}/v1/traces, as service billing-worker" in proc.log.read_text()


@pytest.mark.parametrize("which", ["serve", "worker"])
def test_otel_without_the_sdk_says_which_extra_to_install_before_anything_is_created(
    cli: Cli, tmp_path: Path, which: str
) -> None:
    shadow = tmp_path / "no-sdk"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(NO_SDK)
    cli.write("agent.py", AGENT)
    if which == "serve":
        args = ["serve", "--otel", "--db", "app.db", "--graph", "agent=agent.py:graph", "--port", "0"]
    else:  # never connected to: the refusal comes first
        args = ["worker", "--otel", "--db", "postgresql://nobody@127.0.0.1:1/none", "--graph", "agent.py:graph"]
    env = {"PYTHONPATH": f"{shadow}{':'}{cli.env['PYTHONPATH']}"}
    res = cli(*args, env=env)
    assert res.code == 2, res.err
    line = res.one_line()
    assert "--otel sends traces with OpenTelemetry's SDK" in line and "pip install 'plait[otel-export]'" in line
    assert not (cli.folder / "app.db").exists()


def test_the_no_sdk_shadow_hides_only_the_sdk(tmp_path: Path) -> None:
    """The stand-in for a missing extra above: the SDK does not import, the API still does."""
    shadow = tmp_path / "no-sdk"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(NO_SDK)
    code = "import opentelemetry.trace\ntry:\n    import opentelemetry.sdk.trace\nexcept ImportError:\n    print('no')"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(shadow)}, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "no"
