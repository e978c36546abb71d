"""``request_of`` reads every option as ``run.options.AnalyzeOptions`` declares it: its Python
form and its text alike (what the CLI passes, what a notebook writes), anything else refused
with a ``UsageError`` that names the flag; and each option's choices are listed once."""

from __future__ import annotations

import ast
import typing
from pathlib import Path
from typing import Any

import pytest
import typer

from tracecomm.cli import app
from tracecomm.compat.rules import MODES
from tracecomm.errors import UsageError
from tracecomm.mfu.inputs import ModelInputs
from tracecomm.run.options import OPTIONS, SPECS, AnalyzeOptions
from tracecomm.run.request import MODEL_KEYS, Request, request_of

PACKAGE = Path(__file__).resolve().parents[2] / "tracecomm"
RUN = "run/"

# option -> (its text, as the CLI's flag takes it; its Python form), each not the default
SAMPLES: dict[str, tuple[str, Any]] = {
    "steps": ("3:7", (3, 7)),
    "all_steps": ("true", True),
    "step_range": (r"step_(\d+)", r"step_(\d+)"),
    "comm_pattern": ("myReduce=AllReduce", ["myReduce=AllReduce"]),
    "compute_pattern": ("gemm", ["gemm"]),
    "rank_from": ("process_name", "process_name"),
    "jobs": ("4", 4),
    "executor": ("dask", "dask"),
    "cache": ("cache", Path("cache")),
    "no_clock_align": ("yes", True),
    "nccl_log": ("extra.log", [Path("extra.log")]),
    "link_gbps": ("100", 100.0),
    "timeline_ranks": ("0,7", [0, 7]),
    "pp_stages": ("2", 2),
    "microbatches": ("8", 8),
    "project": ("1", True),
    "to": ("256,512", [256, 512]),
    "weak": ("on", True),
    "detail": ("timeline", ["timeline"]),
    "compat": ("hta-0.5", "hta-0.5"),
    "max_inflate_ratio": ("50", 50.0),
    "max_trace_size": ("1GiB", 1 << 30),
    "max_event_size": ("1MiB", 1 << 20),
    "export_ranks": ("0,7", [0, 7]),
    "export_steps": ("5", 5),
    "model_flops_per_step": ("3.16e15", 3.16e15),
    "flops_per_token": ("8e8", 8e8),
    "tokens_per_step": ("1000000", 1_000_000),
    "model_config": ("config.json", Path("config.json")),
    "seq_len": ("4096", 4096),
    "global_batch": ("256", 256),
    "flops_formula": ("6n", "6n"),
    "attention": ("full", "full"),
    "dtype": ("fp8", "fp8"),
    "peak_tflops": ("989.5", 989.5),
}


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # --cache makes its folder


def test_every_option_has_a_sample() -> None:
    assert list(SAMPLES) == list(OPTIONS)


@pytest.mark.parametrize("name", OPTIONS)
def test_an_option_takes_its_text_and_its_python_form_alike(name: str) -> None:
    text, typed = SAMPLES[name]
    from_text = request_of(RUN, **{name: text})
    assert from_text == request_of(RUN, **{name: typed})
    assert from_text != request_of(RUN)  # the value did something


def _command_with(name: str) -> Any:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return next(c for c in commands.values() if any(p.name == name for p in c.params))


@pytest.mark.parametrize("name", OPTIONS)
def test_what_the_cli_passes_reads_as_the_text_does(name: str) -> None:
    """The flag's text, parsed by typer to the type the declaration gives the CLI, makes the
    request the same text makes through the API."""
    text, _ = SAMPLES[name]
    spec = SPECS[name]
    command = _command_with(name)
    flag = [spec.flag_name] if spec.kind.cli is bool else [spec.flag_name, text]
    required = [
        arg
        for p in command.params
        if p.required and p.name != name
        for arg in (["x"] if p.param_type_name == "argument" else [p.opts[0], "x"])
    ]
    ctx = command.make_context(command.name, [*required, *flag])
    assert request_of(RUN, **{name: ctx.params[name]}) == request_of(RUN, **{name: text})


@pytest.mark.parametrize("name", OPTIONS)
def test_a_value_of_no_admitted_type_names_the_flag(name: str) -> None:
    with pytest.raises(UsageError, match=f"^{SPECS[name].flag_name} "):
        request_of(RUN, **{name: object()})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("jobs", "x", "--jobs 'x': expected a number"),
        ("jobs", "2.5", "--jobs '2.5': expected a whole number"),
        ("jobs", 0, "--jobs 0: must be positive"),
        ("jobs", float("nan"), "--jobs nan: must be positive"),
        ("link_gbps", "-1", "--link-gbps '-1': must be positive"),
        ("pp_stages", True, "--pp-stages True: expected a number"),
        ("max_inflate_ratio", "many", "--max-inflate-ratio 'many': expected a number"),
        ("seq_len", "0", "--seq-len '0': expected a positive whole number"),
        ("peak_tflops", "fast", "--peak-tflops 'fast': expected a number of TFLOP/s"),
        ("steps", "7:3", "--steps '7:3': first step is after the last one"),
        ("export_steps", "x", "--export-steps 'x': expected A:B, A:, :B or A"),
        ("to", "0", "--to '0': world sizes must be positive"),
        ("timeline_ranks", "a,b", "--timeline-ranks 'a,b': expected numbers separated by"),
        ("compat", "hta-9", "--compat 'hta-9': one of hta, hta-0.6, hta-0.5"),
        ("rank_from", "tid", "--rank-from 'tid': one of pid, process_name"),
        ("detail", ["instances", "x"], "--detail 'x': one of instances, timeline"),
        ("dtype", "fp4", "--dtype 'fp4': one of bf16, fp16, fp8, tf32, fp32"),
        ("all_steps", "maybe", "--all-steps 'maybe': expected True or False"),
        ("max_trace_size", "big", "--max-trace-size 'big': expected a size"),
    ],
)
def test_a_bad_value_is_refused_in_the_words_of_its_flag(
    name: str, value: Any, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        request_of(RUN, **{name: value})
    assert str(caught.value).startswith(message)


def test_the_typed_dict_is_the_declaration() -> None:
    """AnalyzeOptions' keys are the options, in order; each field's type is what the API takes
    (the CLI's own type aside) and the MFU options are ModelInputs' fields, defaults and all."""
    hints = typing.get_type_hints(AnalyzeOptions)
    assert tuple(hints) == OPTIONS == tuple(SPECS)
    assert all(hints[name] == SPECS[name].python for name in OPTIONS)
    assert set(MODEL_KEYS) <= set(OPTIONS)
    defaults = ModelInputs()
    for name in MODEL_KEYS:
        assert SPECS[name].flag.default in (None, getattr(defaults, name)), name
    assert Request(inputs=(RUN,)) == request_of(RUN)


def test_the_cli_takes_its_choices_from_the_declaration() -> None:
    params = {p.name: p for p in _command_with("compat").params}
    assert list(params["compat"].type.choices) == list(MODES)
    assert tuple(MODES) == SPECS["compat"].kind.choices
    assert tuple(params["rank_from"].type.choices) == SPECS["rank_from"].kind.choices
    assert params["attention"].metavar == "|".join(SPECS["attention"].kind.choices)


def _literals(tree: ast.AST) -> list[tuple[set[str], str]]:
    """Every tuple, list, set and Literal[...] of two or more strings, every dict's string keys
    and every string, as (values, where)."""
    found = []
    for node in ast.walk(tree):
        items: list[ast.expr | None] = []
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(({node.value}, f"{node.value!r} line {node.lineno}"))
        strings = {
            i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
        }
        if len(items) >= 2 and len(strings) == len(items) and isinstance(node, ast.expr):
            found.append((strings, f"line {node.lineno}"))
    return found


@pytest.mark.parametrize("name", [n for n in OPTIONS if SPECS[n].kind.choices])
def test_each_choice_list_is_written_once(name: str) -> None:
    """An option's choices appear as one list in the whole package (a metavar or a message
    writes them from it), never copied into a second list or a literal "a|b" string."""
    choices = set(SPECS[name].kind.choices)
    joined = {"|".join(SPECS[name].kind.choices)}
    where = [
        f"{path.relative_to(PACKAGE.parent)} {at}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for values, at in _literals(ast.parse(path.read_text()))
        if values in (choices, joined)
    ]
    assert len(where) == 1, where
