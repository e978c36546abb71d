"""MFU on generated runs: step time, devices and FLOPs known by construction."""

from __future__ import annotations

import dataclasses
import io
import json
import statistics
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tests.mfu.test_flops import LLAMA3_8B
from tracecomm.cli import EXIT_USAGE, app
from tracecomm.mfu.flops import flops_per_token
from tracecomm.mfu.inputs import ModelInputs
from tracecomm.mfu.model import model_shape
from tracecomm.render.mfu_panel import mfu_panel
from tracecomm.run.discover import discover
from tracecomm.run.request import AnalyzeOptions
from tracecomm.run.session import read_run
from tracecomm.synth import RunSpec, fsdp_run, write_run


def expected_step_ns(spec: RunSpec) -> int:
    """metrics.md §8 from the schedule: per complete step the slowest rank's ProfilerStep span,
    the first step dropped (warm-up), the median of the rest."""
    spans: dict[int, int] = {}
    for rank in spec.ranks:
        for step in rank.steps[:-1]:  # the last step is cut short (incomplete)
            span = step.cpu_end_ns - step.cpu_start_ns
            spans[step.number] = max(spans.get(step.number, 0), span)
    kept = sorted(spans)[1:]
    return round(statistics.median(spans[s] for s in kept))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunSpec, Path]:
    spec = fsdp_run(world_size=8, steps=4, seed=3, jitter=0.0)
    path = tmp_path_factory.mktemp("run")
    write_run(spec, path)
    return spec, path


def test_exact_mfu_from_flops_per_step(run: tuple[RunSpec, Path]) -> None:
    spec, path = run
    doc = analyze_json(path, "--model-flops-per-step", "1.2e13", "--tokens-per-step", "8192")
    th = doc["throughput"]
    step = expected_step_ns(spec)
    assert th["steps"] == [13, 14, 15] and th["step_time_ns"] == step
    assert th["device_count"] == 8 and th["peak_total_tflops"] == pytest.approx(8 * 989.4)
    # exact up to float rounding (the order of the products differs)
    assert th["mfu"] == pytest.approx(12_000_000_000_000 / (step / 1e9 * 8 * 989.4e12), rel=1e-12)
    assert th["tokens_per_s"] == 8192 / (step / 1e9)
    assert th["achieved_tflops_per_device"] == pytest.approx(th["mfu"] * 989.4)
    assert th["flops"]["per_step"] == 12 * 10**12 and th["missing"] is None


def test_mfu_from_a_model_config(run: tuple[RunSpec, Path], tmp_path: Path) -> None:
    spec, path = run
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_8B))
    args = ["--model-config", str(config), "--seq-len", "4096", "--global-batch", "2"]
    doc = analyze_json(path, *args, "--dtype", "fp8")
    th = doc["throughput"]
    per_token = flops_per_token(model_shape(LLAMA3_8B), 4096)
    assert th["flops"]["per_token"] == per_token == 48_249_176_064
    assert th["flops"]["tokens_per_step"] == 8192
    assert "exact, causal attention halved" in th["flops"]["source"]
    step = expected_step_ns(spec)
    assert th["mfu"] == pytest.approx(per_token * 8192 / (step / 1e9 * 8 * 1978.9e12), rel=1e-12)
    assert th["hfu"] is not None and th["hfu"] > th["mfu"]


def test_settings_file_in_the_run_folder(run: tuple[RunSpec, Path], tmp_path: Path) -> None:
    spec, _ = run
    write_run(spec, tmp_path)
    (tmp_path / "tracecomm.toml").write_text(
        "[model]\nflops_per_token = 6_000_000\ntokens_per_step = 1_000_000\n"
        "[device]\npeak_tflops = 500.0\n"
    )
    th = analyze_json(tmp_path)["throughput"]
    assert th["flops"]["per_step"] == 6 * 10**12
    assert th["devices"][0]["peak"]["model"] == "user"
    assert th["mfu"] == pytest.approx(6e12 / (expected_step_ns(spec) / 1e9 * 8 * 500e12), rel=1e-12)
    # a flag overrides the file
    doc = analyze_json(tmp_path, "--peak-tflops", "250")
    assert doc["throughput"]["peak_total_tflops"] == 2000.0


@pytest.mark.parametrize(
    ("file", "text", "flags", "source"),
    [
        (
            "tracecomm.toml",
            "[model]\nflops-per-step = 1e15\n",
            ModelInputs(),
            "tracecomm.toml [model] flops_per_step",
        ),
        (
            "pyproject.toml",
            "[tool.tracecomm.model]\nflops_per_token = 6e9\ntokens_per_step = 10\n",
            ModelInputs(),
            "pyproject.toml [tool.tracecomm.model] flops_per_token",
        ),
        (
            "tracecomm.toml",
            "[model]\nflops_per_token = 6e9\n",
            ModelInputs(tokens_per_step=10),
            "tracecomm.toml [model] flops_per_token",
        ),
        (
            "tracecomm.toml",
            "[model]\ntokens_per_step = 10\n",
            ModelInputs(flops_per_token=6 * 10**9),
            "--flops-per-token × --tokens-per-step",
        ),
        (
            "tracecomm.toml",
            "[model]\nflops_per_step = 1e15\n",
            ModelInputs(model_flops_per_step=2 * 10**15),
            "--model-flops-per-step",
        ),
    ],
)
def test_the_flops_source_is_where_they_were_given(
    tmp_path: Path, file: str, text: str, flags: ModelInputs, source: str
) -> None:
    """The settings file names itself (by its name: summaries carry a copy) and its key when it,
    not a flag, gave the FLOPs."""
    write_run(fsdp_run(world_size=2, steps=2), tmp_path)
    (tmp_path / file).write_text(text)
    flops = read_run(discover([str(tmp_path)]), flags).flops
    assert flops is not None and flops.source == source


def test_unknown_device_is_named_and_mfu_omitted(tmp_path: Path) -> None:
    spec = dataclasses.replace(fsdp_run(world_size=2, steps=3), device_name="NVIDIA Quantum 9000")
    write_run(spec, tmp_path)
    doc, stderr = analyze_json(tmp_path, "--model-flops-per-step", "1e12", with_stderr=True)
    th = doc["throughput"]
    assert th["mfu"] is None
    assert "warning: no peak for device 'NVIDIA Quantum 9000'" in stderr
    assert "'NVIDIA Quantum 9000'" in th["missing"] and "--peak-tflops" in th["missing"]
    assert th["devices"] == [{"name": "NVIDIA Quantum 9000", "ranks": 2, "peak": None}]


def test_without_flops_the_panel_says_how_to_give_them(run: tuple[RunSpec, Path]) -> None:
    _, path = run
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert "Dashboard vs MFU" in result.stdout and "--model-flops-per-step" in result.stdout
    doc = analyze_json(path)
    th = doc["throughput"]
    assert th["mfu"] is None and th["flops"] is None and th["gaps"][0]["mfu_pct"] is None
    gap = th["gaps"][0]
    parts = ("compute_below_peak_pct", "exposed_comm_pct", "exposed_memory_pct", "idle_pct")
    assert sum(gap[p] for p in parts) == pytest.approx(100.0)
    assert gap["busy_pct"] == pytest.approx(100.0 - gap["idle_pct"])


@pytest.mark.parametrize("with_model", [True, False], ids=["model", "no-model"])
def test_panel_fits_80_columns(tmp_path: Path, with_model: bool) -> None:
    """Every line the panel can print: MFU, HFU, observed FLOPs, energy, the bar and legend;
    without FLOPs, how to give them."""
    from tracecomm import analyze
    from tracecomm.synth.power import power_log
    from tracecomm.synth.shapes import with_shapes

    spec = with_shapes(fsdp_run(world_size=8, steps=3, seed=1))
    write_run(spec, tmp_path)
    (tmp_path / "power.csv").write_text(power_log(spec, "node0", lambda g, t: 700.0))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_8B))
    model: AnalyzeOptions = (
        {"model_config": config, "seq_len": 1024, "global_batch": 1} if with_model else {}
    )
    report = analyze(tmp_path, **model)
    th = report.throughput
    assert th is not None and th.observed and th.energy
    assert (th.hfu is not None) == with_model

    def render(width: int) -> list[str]:
        out = io.StringIO()
        Console(file=out, width=width, force_terminal=False).print(mfu_panel(th, "all ranks"))
        return [line.rstrip() for line in out.getvalue().splitlines()]

    # rich wraps what is too long: the panel fits when a wide console prints the same lines
    lines = render(80)
    assert lines == render(200)
    assert max(len(line) for line in lines) <= 80
    needles = ("█", "HFU", "tokens/J") if with_model else ("--model-config", "--seq-len")
    for needle in ("MFU", "observed", "energy", "idle", *needles):
        assert any(needle in line for line in lines), needle


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--flops-per-token", "6e9"], "--flops-per-token needs --tokens-per-step"),
        (["--model-flops-per-step", "1e15", "--flops-per-token", "1"], "one source"),
        (["--model-flops-per-step", "lots"], "not a number"),
        (["--dtype", "int4"], "--dtype 'int4'"),
        (["--model-config", "missing.json", "--seq-len", "8", "--global-batch", "1"], "missing"),
        (["--model-config", "x.json"], "needs --seq-len and --global-batch"),
    ],
)
def test_bad_model_inputs_are_usage_errors(
    run: tuple[RunSpec, Path], args: list[str], message: str
) -> None:
    _, path = run
    result = CliRunner().invoke(app, ["analyze", str(path), *args])
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr and "Traceback" not in result.stderr
