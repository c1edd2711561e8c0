"""Every option of every subcommand has help text, and every `--help` ends with worked examples (issue 25).

In-process (argparse only): no Spark, no catalog.
"""

from __future__ import annotations

import argparse

import pytest

from icetail.monitor.cli.main import build_parser, main

COMMANDS = ["changes", "plan", "run", "serve", "status", "reset", "demo"]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_is_covered() -> None:
    assert sorted(_subparsers()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_help(command: str) -> None:
    parser = _subparsers()[command]
    lacking = [
        "/".join(action.option_strings)
        for action in parser._actions
        if action.option_strings and (not action.help or not action.help.strip() or action.help == argparse.SUPPRESS)
    ]
    assert lacking == [], f"icetail {command}: options without help text: {lacking}"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_ends_with_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: icetail {command}")
    examples = out.split("\nexamples:\n")
    assert len(examples) == 2, f"icetail {command} --help has no 'examples:' section"
    commands = [line.strip() for line in examples[1].splitlines() if line.strip().startswith("icetail ")]
    assert 2 <= len(commands) <= 3, commands
    assert all(line.startswith(f"icetail {command} ") or line == f"icetail {command}" for line in commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_examples_parse(command: str) -> None:
    """Each example is a command line the parser accepts (continuation lines joined)."""
    parser = build_parser()
    text = _subparsers()[command].epilog or ""
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines()]
    for line in (line for line in lines if line.startswith("icetail ")):
        args = parser.parse_args(line.split()[1:])
        assert args.command == command


def test_misspelt_flag_still_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--stae", "sqlite:///s.db"])
    assert exited.value.code == 2
    expected = "icetail status: error: unknown option --stae; did you mean --state?"
    assert capsys.readouterr().err.splitlines() == [expected]
