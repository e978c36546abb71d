"""Options are declared once (tracecomm.analyze's in tracecomm/run/options.py, the CLI's own in
tracecomm/cli/options.py) and every command that analyzes a run takes the same analysis
options."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import typer

from tracecomm.cli import app

CLI = Path(__file__).resolve().parents[2] / "tracecomm" / "cli"
ANALYZING = ("analyze", "report", "export", "project", "compare", "check", "baseline")


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)
    ]


def test_typer_options_are_declared_only_in_the_options_module() -> None:
    for path in sorted(CLI.rglob("*.py")):
        if path.name in ("options.py", "app.py"):  # app.py: --version, the root's own
            continue
        assert not _calls(ast.parse(path.read_text()), "Option"), path


def test_no_option_is_declared_twice() -> None:
    """The CLI's own options once each in cli/options.py; tracecomm.analyze's only in
    run.options, each one object in every group that takes it."""
    from tracecomm.cli import options
    from tracecomm.run.options import SPECS

    tree = ast.parse((CLI / "options.py").read_text())
    names = [
        call.args[0].value
        for fn in ("option", "_budget")
        for call in _calls(tree, fn)
        if call.args and isinstance(call.args[0], ast.Constant)
    ]
    assert names and [n for n, k in Counter(names).items() if k > 1] == []
    assert [n for n in names if n in SPECS] == []
    held = [
        o
        for value in vars(options).values()
        for o in (value if isinstance(value, tuple) else (value,))
        if isinstance(o, options.Option)
    ]
    by_name: dict[str, set[int]] = {}
    for o in held:
        by_name.setdefault(o.name, set()).add(id(o))
    assert set(SPECS) <= set(by_name)
    assert [n for n, ids in by_name.items() if len(ids) > 1] == []


@pytest.mark.parametrize("command", ANALYZING)
def test_the_api_options_show_their_declaration(command: str) -> None:
    """Each flag of a tracecomm.analyze option is what run.options declares: metavar, help,
    panel, short spelling and default."""
    from tracecomm.cli.options import text
    from tracecomm.run.options import SPECS

    for name, param in _params(command).items():
        spec = SPECS.get(name)
        if spec is None:
            continue
        assert param.opts[0] == spec.flag_name
        assert param.opts[1:] == ([spec.flag.short] if spec.flag.short else [])
        assert getattr(param, "help", None) == text(spec.flag.help)
        assert getattr(param, "rich_help_panel", None) == spec.flag.panel
        assert (param.metavar or "") == spec.metavar
        assert param.default == (False if spec.kind.cli is bool else spec.flag.default)


def _params(command: str) -> dict[str, Any]:
    found = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return {p.name: p for p in found.params if p.name}


@pytest.mark.parametrize("command", ANALYZING)
def test_every_analyzing_command_takes_the_analysis_options(command: str) -> None:
    mine = _params(command)
    reference = _params("analyze")
    shared = {
        "steps",
        "all_steps",
        "comm_pattern",
        "compute_pattern",
        "rank_from",
        "jobs",
        "executor",
        "cache",
        "no_clock_align",
        "nccl_log",
        "model_flops_per_step",
        "model_config",
        "peak_tflops",
        "quiet",
    }
    assert shared <= set(mine)
    for name in shared:
        assert getattr(mine[name], "help", None) == getattr(reference[name], "help", None)


def test_the_api_options_are_the_cli_flags_one_list() -> None:
    """tracecomm.analyze's keywords (run.request.AnalyzeOptions, whose keys are OPTIONS) are
    the analyzing commands' flags, name for name (export's and project's too): what the CLI
    adds is how it prints."""
    import inspect

    import tracecomm
    from tracecomm.run.request import OPTIONS, AnalyzeOptions

    flags = set(_params("analyze")) - {"run"}
    every = {name for command in ANALYZING for name in _params(command)}
    printing = {"output_format", "output", "quiet", "brief", "top", "color", "width", "progress"}
    printing |= {"table", "parquet"}  # which table, and to which file
    assert set(OPTIONS) == set(AnalyzeOptions.__annotations__)
    assert set(OPTIONS) <= every, sorted(set(OPTIONS) - every)
    assert flags - set(OPTIONS) <= printing, sorted(flags - set(OPTIONS) - printing)
    shown = inspect.signature(tracecomm.analyze).parameters
    assert [p for p in shown if p != "paths"] == list(OPTIONS)  # help() lists every one
