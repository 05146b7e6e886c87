"""One set of command-line habits: every flag explained with its default, the same ``--coordinator``
and ``--group`` everywhere, global flags on either side of the command, one-line usage errors."""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator

import pytest

from groupcoord import __version__
from groupcoord.cli import main
from groupcoord.cli.common import COORDINATOR_ENV, DEFAULT_LISTEN
from groupcoord.cli.parser import _HelpFormatter, _parser
from tests.paths import ROOT


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action.choices, dict) and action.nargs == argparse.PARSER:
            for name, child in action.choices.items():
                yield from _leaves(child, (*path, name))


def _outcome(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit status and stderr of ``groupcoord ARGS`` run here (argparse's own exits included)."""
    try:
        status = main(list(args))
    except SystemExit as exit_:
        status = int(exit_.code or 0)
    return status, capsys.readouterr().err


def test_every_flag_has_a_help_line_and_shows_its_default() -> None:
    unexplained, no_default = [], []
    for path, parser in _leaves(_parser()):
        formatter = _HelpFormatter(prog="x")
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            name = " ".join((*path, *(action.option_strings[-1:] or [action.dest])))
            if not action.help or action.help == argparse.SUPPRESS:
                unexplained.append(name)
            elif action.option_strings and action.nargs != 0 and not action.required and not any(
                    word in (formatter._get_help_string(action) or "") for word in ("default", "required")):
                no_default.append(name)
    assert not unexplained, f"flags without a help line: {unexplained}"
    assert not no_default, f"flags whose help says no default: {no_default}"


def test_coordinator_is_one_flag_with_one_help_and_one_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COORDINATOR_ENV, raising=False)
    seen = {}
    for path, parser in _leaves(_parser()):
        flags = {flag: action for action in parser._actions for flag in action.option_strings}
        if "--tls-ca" in flags and path != ("stats",):  # a command that talks to a coordinator
            action = flags.get("--coordinator")
            assert action is not None, f"{path} talks to a coordinator without --coordinator"
            seen[path] = (action.help, action.default)
    assert len(seen) >= 7 and len(set(seen.values())) == 1, seen
    assert next(iter(seen.values()))[1] == DEFAULT_LISTEN
    monkeypatch.setenv(COORDINATOR_ENV, "127.0.0.1:9501,127.0.0.1:9502")
    args = _parser().parse_args(["groups", "describe", "--group", "g"])
    assert args.coordinator == "127.0.0.1:9501,127.0.0.1:9502"
    assert _parser().parse_args(["worker", "--group", "g"]).coordinator == "127.0.0.1:9501,127.0.0.1:9502"


@pytest.mark.parametrize("argv", [
    ["--log-level", "debug", "--log-format", "json", "groups", "list"],
    ["groups", "list", "--log-level", "debug", "--log-format", "json"],
    ["groups", "--log-level", "debug", "list", "--log-format", "json"],
])
def test_global_flags_before_or_after_the_command(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.log_level, args.log_format) == ("debug", "json")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"groupcoord {__version__}"


@pytest.mark.parametrize(("args", "says"), [
    (("groups", "describe", "--bootstrap-server", "127.0.0.1:9092", "--group", "g"),
     "--bootstrap-server is Kafka's name for it: here write --coordinator"),
    (("serve", "--listen", "127.0.0.1:99999"), "with a port from 0 to 65535"),
    (("serve", "--listen", "no-such-host.invalid:9400"), "name not resolved"),
    (("serve", "--metrics-listen", "127.0.0.1:65536"), "with a port from 0 to 65535"),
    (("serve", "--advertise", "10.0.0.1:99999"), "'10.0.0.1:99999' is not HOST:PORT"),
    (("groups", "list", "--coordinator", "127.0.0.1:0"), "is not HOST:PORT"),
    (("groups", "list", "--coordinator", "127.0.0.1:70000"), "is not HOST:PORT"),
    (("worker", "--group", "g", "--coordinator", "no-such-host.invalid:9400"), "name not resolved"),
    (("tasks", "put", "--group", "g", "a", "--coordinator", "no-such-host.invalid:1,nor-this.invalid:2"),
     "nor-this.invalid:2: name not resolved"),
    (("groups", "describe", "--coordinator", "127.0.0.1:9400"), "name the group: --group GROUP"),
    (("groups", "nope"), "invalid choice"),
])
def test_bad_command_lines_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                                   says: str) -> None:
    status, err = _outcome(capsys, *args)
    assert status == 2, err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "usage:" not in err


def test_the_group_positional_still_works_with_a_deprecation_line(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from groupcoord.cli import common

    parsed = _parser().parse_args(["groups", "describe", "shop"])
    assert common.resolve_group(parsed) == "shop"
    assert "deprecated" in capsys.readouterr().err
    put = _parser().parse_args(["tasks", "put", "shop", "a", "b"])
    assert common.resolve_group(put, put.task_ids) == "shop" and put.task_ids == ["a", "b"]
    assert "write --group shop" in capsys.readouterr().err
    new = _parser().parse_args(["tasks", "put", "--group", "shop", "a", "b"])
    assert common.resolve_group(new, new.task_ids) == "shop" and new.task_ids == ["a", "b"]
    assert capsys.readouterr().err == ""


def test_no_function_of_the_cli_is_over_80_lines() -> None:
    long = []
    for path in sorted((ROOT / "groupcoord" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
                continue
            if node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.name}:{node.name}")
    assert not long


def test_help_of_every_command_renders_its_defaults() -> None:
    for path, parser in _leaves(_parser()):
        assert "usage:" in parser.format_help(), path  # a % in a help text would raise here
    worker = dict(_leaves(_parser()))[("worker",)].format_help()
    assert "(default: 10000)" in worker and "(default: round-robin)" in worker
