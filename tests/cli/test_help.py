"""--version, shell completion, and help that says what each argument is, shows defaults and
carries no type noise."""

from __future__ import annotations

from typing import Any

import pytest

import plait
from plait.cli import EXIT_OK

from ._cli_support import Cli

COMMANDS = [
    ("demo",), ("run",), ("resume",), ("update",), ("draw",), ("threads",), ("history",), ("state",), ("diff",),
    ("fork",), ("delete",), ("watch",), ("export",), ("import",), ("db",), ("db", "migrate"), ("db", "prune"),
    ("db", "stats"), ("db", "sweep"), ("db", "vacuum"), ("db", "retention"), ("store",), ("store", "ls"),
    ("store", "get"), ("store", "put"),
    ("store", "search"), ("store", "rm"), ("studio",), ("serve",), ("worker",), ("submit",), ("runs",),
    ("run-cancel",), ("schedule",), ("schedules",), ("migrate",),
]  # fmt: skip
GROUPS = [("db",), ("store",)]


def test_version(cli: Cli) -> None:
    for flag in ("--version", "-V"):
        res = cli(flag)
        assert res.code == EXIT_OK
        assert res.out.strip() == f"plait {plait.__version__}"


def test_shell_completion_is_installable(cli: Cli) -> None:
    res = cli("--help")
    assert "--install-completion" in res.out and "--show-completion" in res.out
    # typer detects the shell from the process tree (a test's parent is pytest, not a shell);
    # its own switch makes the option take the shell's name, as it does where none is found
    res = cli(
        "--show-completion", "bash", env={"SHELL": "/bin/bash", "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    )
    assert res.code == EXIT_OK, res.err
    assert "_plait_completion" in res.out and "complete " in res.out


def test_help_has_no_type_noise_and_shows_defaults(cli: Cli) -> None:
    texts = {}
    for command, res in zip(COMMANDS, cli.many(*((*c, "--help") for c in COMMANDS)), strict=True):
        assert res.code == EXIT_OK, (command, res.err)
        for noise in ("<bool>", "<str>", "<int>", "<list"):
            assert noise not in res.out, (command, noise)
        texts[command] = res.out
    assert "[default: sync]" in texts[("run",)] and "[default: {}]" in texts[("run",)]
    assert "[default: 10000]" in texts[("run",)]
    assert "[default: mermaid]" in texts[("draw",)]
    assert "[default: 0.5]" in texts[("watch",)]
    assert "--wait" in texts[("resume",)] and "--since" in texts[("threads",)] and "--status" in texts[("threads",)]
    assert "[default: plait-demo.db]" in texts[("demo",)]
    for command in (("threads",), ("history",), ("db", "stats")):
        assert "Default: $PLAIT_DB if set, else plait.db." in texts[command]
    assert "key=value for a string, key:=json for any JSON value" in texts[("update",)]
    assert "0 done, 1 the run failed, 2 usage error or not found, 3 paused for input" in cli("--help").out


def walk(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subs = getattr(command, "commands", {})
    if not subs:
        return [(path, command)]
    return [item for name, sub in subs.items() for item in walk(sub, (*path, name))]


def test_every_argument_and_option_is_described() -> None:
    from plait.cli.app import build_command

    commands = walk(build_command())
    assert len(commands) == len([c for c in COMMANDS if c not in GROUPS])  # groups are no leaves
    for path, command in commands:
        assert command.help, path
        for param in command.params:
            assert (param.help or "").strip(), (path, param.name)


THREAD_PARAMS = {"thread", "a", "b"}


@pytest.mark.parametrize(
    "path", [c for c in COMMANDS if c not in (*GROUPS, ("db", "migrate"), ("db", "stats"), ("worker",))]
)
def test_every_command_that_takes_a_thread_takes_a_namespace(path: tuple[str, ...]) -> None:
    from plait.cli.app import build_command

    command = dict(walk(build_command()))[path]
    names = {p.name for p in command.params}
    if names & THREAD_PARAMS or path in (("run",), ("import",)):
        assert "namespace" in names, path


def test_without_a_command_help_is_shown(cli: Cli) -> None:
    res = cli()
    assert res.code == 2
    assert "Usage: plait" in res.out + res.err and "Commands" in res.out + res.err


def test_the_cli_page_lists_every_command_and_flag() -> None:
    import pathlib

    from plait.cli.app import build_command

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    for path, command in walk(build_command()):
        name = " ".join(path)
        assert f"`{name}" in page, f"docs/cli.md does not list plait {name}"
        for param in command.params:
            for flag in param.opts:
                if flag.startswith("--"):
                    assert f"`{flag}" in page or f"{flag} " in page or f"{flag}/" in page, (name, flag)
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |"):
        assert code in page
