"""A conventional command line: every command's help shows metavars, never type names, keeps
its square brackets, answers to -h, and usage errors come in the one error style."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, EXIT_USAGE, app

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
TYPE_NAME = re.compile(r"<(?:bool|int|float|str|text|path|list\[[^>]*\]|[a-z]+ range)>", re.I)
runner = CliRunner(env={"COLUMNS": "100"})


def help_of(*args: str) -> Any:
    return runner.invoke(app, [*args, "--help"])


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_shows_no_type_names_and_h_works(command: str) -> None:
    args = [command] if command else []
    long = help_of(*args)
    short = runner.invoke(app, [*args, "-h"])
    assert long.exit_code == short.exit_code == EXIT_OK
    assert long.stdout == short.stdout
    assert not TYPE_NAME.search(long.stdout), TYPE_NAME.search(long.stdout)
    assert "Usage: tracecomm" in long.stdout


@pytest.mark.parametrize(
    ("command", "literal"),
    [
        ("analyze", "*.json[.gz]"),
        ("analyze", "tracecomm[dask]"),
        ("analyze", "REGEX[=TYPE]"),
        ("crosscheck", "tracecomm[hta]"),
        ("check", "[check]"),
    ],
)
def test_square_brackets_are_shown_as_written(command: str, literal: str) -> None:
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", help_of(command).stdout).split())
    assert literal in flat


def test_usage_lines_name_what_to_write() -> None:
    assert "Usage: tracecomm analyze [OPTIONS] RUN..." in help_of("analyze").stdout
    assert "Usage: tracecomm nccl [OPTIONS] LOG..." in help_of("nccl").stdout


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "--no-such-option"],
        ["analyze"],
        ["analyze", ".", "--format", "xml"],
        ["report", "."],
        ["no-such-command"],
    ],
)
def test_usage_errors_are_one_line_in_the_tools_style(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_USAGE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracecomm: error: "), result.stderr
    assert "-h)" in lines[0] and "Traceback" not in result.stderr


def test_every_command_that_writes_a_file_takes_output_o() -> None:
    for command in ("report", "baseline", "ingest"):
        out = " ".join(help_of(command).stdout.split())
        assert re.search(r"--output(,--out)? -o (FILE|DIR)", out), command
