"""The ``plait`` commands called in-process (``main(argv)``), on a temporary SQLite file and a graph
module written to tmp_path; the subprocess tests beside this file run the console script."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from plait.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main

from ._cli_support import FLOW


@pytest.fixture
def flow(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "flow.py"
    path.write_text(FLOW)
    return path


def plait(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code, out, err = plait(capsys, *args, "--json")
    return code, json.loads(out)


def test_run_finishes_and_prints_the_final_values_as_json(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, data = run_json(capsys, "run", "flow.py:graph", "--input", '{"topic": "x"}', "--thread", "t1", "--db", "t.db")
    assert code == EXIT_OK
    assert data["status"] == "done"
    assert data["thread_id"] == "t1"
    assert data["values"]["log"] == ["hello x", "checked"]
    assert data["next"] == []


def test_run_accepts_input_from_a_file_and_a_module_name(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pathlib.Path("in.json").write_text('{"topic": "file"}')
    code, data = run_json(capsys, "run", "flow:graph", "--input", "@in.json", "--thread", "t", "--db", "t.db")
    assert code == EXIT_OK
    assert data["values"]["log"][0] == "hello file"


def test_run_of_a_compiled_graph_uses_the_db_given(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_json(capsys, "run", "flow.py:compiled", "-i", '{"topic": "c"}', "-t", "tc", "--db", "c.db")
    assert code == EXIT_OK
    code, threads = run_json(capsys, "threads", "--db", "c.db")
    assert [t["thread_id"] for t in threads] == ["tc"]


def test_a_failing_run_exits_1_with_one_line(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "t2", "--db", "t.db")
    assert code == EXIT_FAILED
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: NodeError:") and "bad topic" in lines[0]
    assert "Traceback" not in err


def test_debug_shows_the_traceback(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plait(
        capsys, "run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "t2", "--db", "t.db", "--debug"
    )
    assert code == EXIT_FAILED
    assert "Traceback" in err


def test_an_interrupt_exits_3_and_resume_answers_it(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "t3", "--db", "t.db")
    assert code == EXIT_INTERRUPTED
    assert data["status"] == "interrupted"
    assert data["interrupts"][0]["value"] == {"question": "publish q?"}
    code, data = run_json(capsys, "resume", "flow.py:with_question", "t3", "--resume", '{"ok": true}', "--db", "t.db")
    assert code == EXIT_OK
    assert data["values"]["answer"] == {"ok": True}
    assert data["values"]["log"] == ["hello q", "asked"]


def test_plain_output_of_an_interrupt_says_how_to_resume(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = plait(capsys, "run", "flow.py:with_question", "-i", '{"topic": "q"}', "-t", "t3", "--db", "t.db")
    assert code == EXIT_INTERRUPTED
    assert "publish q?" in out
    assert "plait resume flow.py:with_question t3 --resume JSON" in out


def test_resume_after_a_failure_reruns_only_what_failed(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "bad"}', "-t", "t4", "--db", "t.db")
    code, out, err = plait(capsys, "update", "t4", "--graph", "flow.py:graph", "--set", "topic=good", "--db", "t.db")
    assert code == EXIT_OK, err
    code, data = run_json(capsys, "resume", "flow.py:graph", "t4", "--db", "t.db")
    assert code == EXIT_OK
    assert data["values"]["log"] == ["hello bad", "checked"]  # greet did not run again


def test_threads_history_and_state_read_the_store_without_the_graph(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t1", "--db", "t.db")
    flow.unlink()  # inspection needs no graph module
    code, threads = run_json(capsys, "threads", "--db", "t.db")
    assert code == EXIT_OK
    assert [t["thread_id"] for t in threads] == ["t1"]
    assert threads[0]["checkpoints"] == 3

    code, history = run_json(capsys, "history", "t1", "--db", "t.db")
    assert [h["step"] for h in history] == [2, 1, 0]
    assert [h["metadata"]["source"] for h in history] == ["loop", "loop", "input"]
    code, limited = run_json(capsys, "history", "t1", "--limit", "1", "--db", "t.db")
    assert len(limited) == 1

    code, state = run_json(capsys, "state", "t1", "--db", "t.db")
    assert state["values"] == {"log": ["hello x", "checked"], "topic": "x"}
    code, old = run_json(capsys, "state", "t1", "--checkpoint", history[-1]["checkpoint_id"], "--db", "t.db")
    assert old["values"] == {"log": [], "topic": "x"}
    assert old["next"] == ["greet"]
    code, log = run_json(capsys, "state", "t1", "--key", "log", "--db", "t.db")
    assert log == ["hello x", "checked"]


def test_plain_outputs_name_what_they_show(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t1", "--db", "t.db")
    code, out, _ = plait(capsys, "threads", "--db", "t.db")
    assert code == EXIT_OK and "t1" in out
    code, out, _ = plait(capsys, "history", "t1", "--db", "t.db")
    assert code == EXIT_OK and "greet: log" in out
    code, out, _ = plait(capsys, "state", "t1", "--db", "t.db")
    assert code == EXIT_OK and "hello x" in out and "(finished)" in out


@pytest.mark.parametrize(
    "args",
    [
        ("state", "nope"),
        ("history", "nope"),
        ("diff", "nope", "t1"),
        ("fork", "nope", "--to", "x"),
    ],
)
def test_an_unknown_thread_is_one_line_and_a_nonzero_exit(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "t1", "--db", "t.db")
    code, out, err = plait(capsys, *args, "--db", "t.db")
    assert code == EXIT_USAGE  # not found
    assert len(err.strip().splitlines()) == 1
    assert "nope" in err and "Traceback" not in err


def test_a_missing_database_is_a_usage_error(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plait(capsys, "threads", "--db", "missing.db")
    assert code == EXIT_USAGE
    assert "missing.db" in err
    assert not pathlib.Path("missing.db").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("run", "flow.py:graph", "-i", "{bad"), "not valid JSON"),
        (("run", "flow.py:nothing"), "no attribute"),
        (("run", "flow.py"), "MODULE:GRAPH"),
        (("run", "flow.py:graph", "-i", "[1, 2]"), "JSON object"),
        (("run", "flow.py:schema"), "not a Graph"),
        (("run", "flow.py:graph", "--durability", "bogus"), "--durability"),
    ],
)
def test_usage_errors_exit_2(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, _, err = plait(capsys, *args, "--db", "t.db")
    assert code == EXIT_USAGE
    assert needle in err


def test_an_unknown_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = plait(capsys, "threads", "--no-such-option")
    assert code == EXIT_USAGE


def test_fork_with_an_edit_and_diff(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "t.db")
    _, history = run_json(capsys, "history", "a", "--db", "t.db")
    first = history[-1]["checkpoint_id"]
    code, forked = run_json(
        capsys, "fork", "a", "--checkpoint", first, "--to", "b", "--set", "topic=y", "--graph", "flow.py:graph",
        "--db", "t.db",
    )  # fmt: skip
    assert code == EXIT_OK and forked["thread_id"] == "b"
    code, data = run_json(capsys, "resume", "flow.py:graph", "b", "--db", "t.db")
    assert data["values"]["log"] == ["hello y", "checked"]
    code, d = run_json(capsys, "diff", "a", "b", "--db", "t.db")
    assert code == EXIT_OK
    assert d["first_step"] == 0
    assert d["keys"] == ["topic"]
    changed = {c["key"]: (c["before"], c["after"]) for c in d["heads"]["changed"]}
    assert changed == {"log": (["hello x", "checked"], ["hello y", "checked"]), "topic": ("x", "y")}


def test_fork_with_set_needs_the_graph(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "t.db")
    code, _, err = plait(capsys, "fork", "a", "--to", "b", "--set", "topic=1", "--db", "t.db")
    assert code == EXIT_USAGE
    assert "--graph" in err


def test_fork_without_edits_copies_the_head_without_the_graph(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "t.db")
    code, _ = run_json(capsys, "fork", "a", "--to", "copy", "--db", "t.db")
    assert code == EXIT_OK
    _, state = run_json(capsys, "state", "copy", "--db", "t.db")
    assert state["values"]["log"] == ["hello x", "checked"]
    assert state["metadata"]["source"] == "fork"
    _, d = run_json(capsys, "diff", "a", "copy", "--db", "t.db")
    assert d["first_step"] is None
    code, _, err = plait(capsys, "fork", "a", "--to", "copy", "--db", "t.db")
    assert code == EXIT_USAGE and "already exists" in err


def test_update_folds_through_the_reducers(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "t.db")
    code, data = run_json(capsys, "update", "a", "--graph", "flow.py:graph", "--set", "log=manual", "--db", "t.db")
    assert code == EXIT_OK
    assert data["values"]["log"] == ["hello x", "checked", "manual"]  # AppendList appended
    code, _, err = plait(capsys, "update", "a", "--graph", "flow.py:graph", "--set", "nope=1", "--db", "t.db")
    assert code == EXIT_USAGE and "UnknownChannelError" in err  # named on the command line: a usage error


def test_db_migrate_stats_and_prune(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = run_json(capsys, "db", "migrate", "--db", "new.db")
    assert code == EXIT_OK and pathlib.Path("new.db").exists()
    plait(capsys, "run", "flow.py:graph", "-i", '{"topic": "x"}', "-t", "a", "--db", "new.db")
    code, stats = run_json(capsys, "db", "stats", "--db", "new.db")
    assert stats["threads"] == 1 and stats["checkpoints"] == 3
    code, pruned = run_json(capsys, "db", "prune", "--keep-last", "1", "--db", "new.db", "--yes")
    assert code == EXIT_OK and pruned["dropped"] == 2
    _, stats = run_json(capsys, "db", "stats", "--db", "new.db")
    assert stats["checkpoints"] == 1


@pytest.mark.parametrize("fmt", ["mermaid", "ascii", "svg"])
def test_draw(flow: pathlib.Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    code, out, _ = plait(capsys, "draw", "flow.py:with_question", "--format", fmt)
    assert code == EXIT_OK
    assert "greet" in out and "ask" in out
    if fmt == "mermaid":
        assert out.startswith("flowchart")
    if fmt == "svg":
        ET.fromstring(out)


def test_draw_to_a_file(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = plait(capsys, "draw", "flow.py:graph", "-f", "svg", "-o", "g.svg")
    assert code == EXIT_OK
    ET.parse("g.svg")


def test_draw_a_png_to_a_file(
    flow: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = plait(capsys, "draw", "flow.py:graph", "-f", "png")
    assert code == EXIT_USAGE and "--output" in err  # binary: never to the terminal
    monkeypatch.setitem(sys.modules, "cairosvg", None)  # as if plait[draw] were not installed
    code, _, err = plait(capsys, "draw", "flow.py:graph", "-f", "png", "-o", "g.png")
    assert code == EXIT_FAILED and "plait[draw]" in err and not pathlib.Path("g.png").exists()
    monkeypatch.delitem(sys.modules, "cairosvg")
    pytest.importorskip("cairosvg")
    code, out, _ = plait(capsys, "draw", "flow.py:graph", "-f", "png", "-o", "g.png")
    assert code == EXIT_OK and "wrote g.png" in out
    assert pathlib.Path("g.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_draw_needs_no_database(flow: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    plait(capsys, "draw", "flow.py:graph")
    assert not pathlib.Path("plait.db").exists()


def env() -> dict[str, str]:
    src = str(pathlib.Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_python_dash_m_plait_runs_the_cli(tmp_path: pathlib.Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "plait", "threads", "--db", "none.db"],
        capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == EXIT_USAGE
    assert out.stderr.strip().startswith("error: no database")


def test_without_typer_the_cli_says_what_to_install(tmp_path: pathlib.Path) -> None:
    code = "import sys; sys.modules['typer'] = None; from plait.cli import main; sys.exit(main(['threads']))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=60, check=False
    )
    assert out.returncode == EXIT_USAGE
    assert out.stderr.strip() == "plait: the command line needs typer and rich: pip install 'plait[cli]'"


def test_import_plait_loads_no_cli_or_server_packages(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys, plait; bad = [m for m in ('typer', 'rich', 'fastapi', 'psycopg', 'click') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=60, check=False
    )
    assert out.returncode == 0, out.stdout


def test_demo_crashes_a_child_resumes_and_forks(tmp_path: pathlib.Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "plait", "demo", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (tmp_path / "plait-demo.db").exists()
    assert summary["crash_exit_code"] == 137
    assert summary["finished_before_crash"] == ["send_email", "post_chat"]
    # after the crash, only the unfinished task and what follows ran in the resuming process
    assert summary["calls_after_resume"] == {"archive": 1, "summarize": 1}
    assert summary["uploads_after_resume"] == 0
    main_thread, fork = summary["threads"]
    # the heads differ in the edit, what the draft said, its messages, and where the deliveries ran
    assert summary["differs_at_end"] == ["deliveries", "draft", "messages", "style"]

    def cli(*args: str) -> Any:
        res = subprocess.run(
            [sys.executable, "-m", "plait", *args, "--db", "plait-demo.db", "--json"],
            capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=60, check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    assert {t["thread_id"] for t in cli("threads")} == {main_thread, fork}
    trail = cli("state", main_thread, "--key", "trail")
    assert sorted(trail) == sorted(set(trail)), "no node ran twice"
    d = cli("diff", main_thread, fork)
    assert d["keys"] == ["style"]


def test_demo_is_safe_to_run_twice(tmp_path: pathlib.Path) -> None:
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-m", "plait", "demo"],
            capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "export PLAIT_DB=plait-demo.db" in out.stdout
        assert "plait threads" in out.stdout
        # every differing key is shown, and steps are numbered as history numbers them
        shown = out.stdout.split("what differs at the end:")[1].split("== Done")[0]
        for key in ("deliveries", "draft", "messages", "style"):
            assert f'"{key}": {{' in shown, key
        assert "step  5  approve           finished" in out.stdout
        assert "step  5  checkpoint" in out.stdout
    threads = subprocess.run(
        [sys.executable, "-m", "plait", "threads", "--db", "plait-demo.db", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env(), timeout=60, check=False,
    )  # fmt: skip
    assert len(json.loads(threads.stdout)) == 4
