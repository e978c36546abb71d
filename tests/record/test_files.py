"""What a recording writes beside the traces, read back by ``analyze``: the settings file, the
NCCL / Flight Recorder environment, and the power log of the NVML sampler (its reader
injected: no GPU here)."""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tracecomm.cli import app
from tracecomm.errors import UsageError
from tracecomm.ingest.power import is_power_log, load_power_log
from tracecomm.mfu.inputs import SETTINGS_KEYS, ModelInputs
from tracecomm.nccl.discover import LOG_SUFFIXES
from tracecomm.nccl.flight import find_dumps
from tracecomm.record.files import (
    RECORDED,
    RunFacts,
    apply_environment,
    recording_environment,
    settings_text,
    write_settings,
)
from tracecomm.record.power import HEADER, PowerSampler
from tracecomm.run.settings import read_settings
from tracecomm.synth import expected_run, fsdp_run, write_run

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def test_the_settings_file_reads_back_as_written(tmp_path: Path) -> None:
    facts = RunFacts(
        model=ModelInputs(
            model_flops_per_step=2**70,  # past TOML's 64-bit integers: written as a string
            tokens_per_step=4096,
            dtype="bf16",
            peak_tflops=989.5,
        ),
        framework="fsdp2",
        world_size=16,
        layout={"dp_shard": 8, "tp": 2},
        steps=(10, 13),
    )
    write_settings(tmp_path, facts)
    settings = read_settings([str(tmp_path)])
    assert settings.model.model_flops_per_step == 2**70
    assert settings.model.tokens_per_step == 4096 and settings.model.peak_tflops == 989.5
    assert settings.run.framework == "fsdp2" and settings.run.world_size == 16
    assert settings.run.steps == (10, 13) and settings.run.layout == {"dp_shard": 8, "tp": 2}
    # absent facts leave their keys out: analyze's defaults stand
    bare = tomllib.loads(settings_text(RunFacts()))
    assert bare == {"run": {"world_size": 1}}


def test_each_recorded_input_is_written_under_its_key_and_read_back_as_its_field(
    tmp_path: Path,
) -> None:
    """One declaration (``mfu.inputs.SETTINGS_KEYS``) places every ModelInputs field in the
    settings file: the recorder writes by it, ``run.settings`` reads by it."""
    assert list(SETTINGS_KEYS) == [f.name for f in dataclasses.fields(ModelInputs)]
    given = ModelInputs(
        model_flops_per_step=10**15,
        flops_per_token=6 * 10**9,
        tokens_per_step=4096,
        dtype="fp8",
        peak_tflops=500.0,
    )
    default = ModelInputs()
    assert {n for n in SETTINGS_KEYS if getattr(given, n) != getattr(default, n)} == set(RECORDED)
    path = write_settings(tmp_path, RunFacts(model=given))
    assert tomllib.loads(path.read_text()) == {
        "model": {
            "flops_per_step": 10**15,
            "flops_per_token": 6 * 10**9,
            "tokens_per_step": 4096,
            "dtype": "fp8",
        },
        "device": {"peak_tflops": 500.0},
        "run": {"world_size": 1},
    }
    assert read_settings([str(tmp_path)]).model == given


def test_strings_are_toml_escaped() -> None:
    text = settings_text(RunFacts(framework='a"b\\c\n\x01\x7fé'))
    assert tomllib.loads(text)["run"]["framework"] == 'a"b\\c\n\x01\x7fé'


@pytest.mark.parametrize(
    ("run", "said"),
    [
        ('framework = "keras"', "[run] framework 'keras': one of vllm"),
        ("world_size = 0", "[run] world_size 0: expected a positive whole number"),
        ("steps = [5, 2]", "[run] steps [5, 2]: expected [first, last] step numbers"),
        ("layout = { dp = -1 }", "[run.layout] maps parallel dimensions to sizes"),
        ("nodes = 2", "[run] unknown key 'nodes'"),
    ],
)
def test_a_bad_run_table_names_the_file_and_the_key(tmp_path: Path, run: str, said: str) -> None:
    (tmp_path / "tracecomm.toml").write_text(f"[run]\n{run}\n")
    with pytest.raises(UsageError) as caught:
        read_settings([str(tmp_path)])
    assert str(caught.value).startswith(f"{tmp_path / 'tracecomm.toml'}: ")
    assert said in str(caught.value)


def test_the_environment_puts_nccl_logs_and_dumps_where_analyze_finds_them(
    tmp_path: Path,
) -> None:
    env = recording_environment(tmp_path)
    assert env["NCCL_DEBUG"] == "INFO" and "INIT" in env["NCCL_DEBUG_SUBSYS"].split(",")
    log = Path(env["NCCL_DEBUG_FILE"].replace("%h", "node0").replace("%p", "123"))
    assert log.parent == tmp_path and log.suffix in LOG_SUFFIXES
    dump = Path(env["TORCH_FR_DUMP_TEMP_FILE"] + "3")  # PyTorch appends the global rank
    dump.write_text("{}")
    assert find_dumps([dump]) == [dump]
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == env["TORCH_FR_DUMP_TEMP_FILE"]


def test_the_environment_is_set_only_where_unset_and_only_in_time() -> None:
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x/nccl.%h.%p.log"}
    environ = {"NCCL_DEBUG": "WARN"}
    assert apply_environment(wanted, environ, too_late=False) == (["NCCL_DEBUG_FILE"], [])
    assert environ == {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": "/x/nccl.%h.%p.log"}
    late: dict[str, str] = {}
    assert apply_environment(wanted, late, too_late=True) == ([], list(wanted))
    assert late == {}


class FakeReader:
    """Four GPUs drawing 300 W + 10 W per index; counts its closing."""

    def __init__(self) -> None:
        self.closed = 0

    def gpus(self) -> list[int]:
        return [0, 1, 2, 3]

    def watts(self, gpu: int) -> float:
        return 300.0 + 10.0 * gpu

    def close(self) -> None:
        self.closed += 1


def test_the_sampler_writes_the_power_log_analyze_reads_as_energy(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=4, steps=4, seed=1, jitter=0.0)
    write_run(spec, tmp_path)
    times = [t for r in spec.ranks for op in r.all_ops() for t in (op.start_ns, op.end_ns)]
    first, last, period = min(times) - 10**9, max(times) + 10**9, 100_000_000
    clock: Iterator[int] = iter(range(first, last + 2 * period, period))
    reader = FakeReader()
    sampler = PowerSampler(reader, tmp_path / "power.node0.csv", "node0", clock=lambda: next(clock))
    for _ in range(first, last, period):  # the thread's samples, taken here in order
        sampler.sample()
    assert sampler.stop() == tmp_path / "power.node0.csv" and reader.closed == 1
    path = tmp_path / "power.node0.csv"
    assert path.read_text().splitlines()[0] == HEADER and is_power_log(path)
    series = load_power_log(path).series["node0"]
    assert sorted(series) == [0, 1, 2, 3] and series[2].watts.tolist()[0] == 320.0
    doc = analyze_json(tmp_path, "--tokens-per-step", "4096", "--model-flops-per-step", "1e12")
    energy = doc["throughput"]["energy"]
    assert energy["gpus"] == 4 and energy["logs"] == [str(path)]
    expected = expected_run(spec)
    per_step = statistics.median(
        sum(reader.watts(r) * e.steps[s].window_ns * 1e-9 for r, e in expected.items())
        for s in doc["throughput"]["steps"]
    )
    assert energy["energy_per_step_j"] == pytest.approx(per_step, rel=1e-12)


def test_a_reader_that_fails_stops_the_sampling_and_keeps_what_it_had(tmp_path: Path) -> None:
    class Failing(FakeReader):
        calls = 0

        def watts(self, gpu: int) -> float:
            self.calls += 1
            if self.calls > 4:
                raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
            return 250.0

    times = iter(range(10**18, 10**18 + 10**10, 10**8))
    sampler = PowerSampler(Failing(), tmp_path / "p.csv", "h", clock=lambda: next(times))
    sampler.sample()
    sampler.sample()
    assert sampler.problem == "power sampling stopped: RuntimeError: NVML_ERROR_GPU_IS_LOST"
    assert sampler.stop() == tmp_path / "p.csv"
    assert len(load_power_log(tmp_path / "p.csv").series["h"]) == 4


def test_the_recorded_steps_are_the_default_steps(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=2, steps=4, seed=3)
    write_run(spec, tmp_path)
    every = analyze_json(tmp_path)["summary"]["steps"]
    write_settings(tmp_path, RunFacts(world_size=2, steps=(every[1], every[2])))
    assert analyze_json(tmp_path)["summary"]["steps"] == every[1:3]
    # a flag wins over the file
    assert analyze_json(tmp_path, "--steps", f"{every[0]}:")["summary"]["steps"] == every
    write_settings(tmp_path, RunFacts(world_size=2, steps=(400, 500)))
    result = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert result.exit_code == 3
    assert result.stderr.startswith(
        f"tracecomm: error: {tmp_path / 'tracecomm.toml'}: [run] steps 400:500: no step of the "
        f"trace is in that range; the traces have steps {min(every)}–"
    )
    assert len(result.stderr.strip().splitlines()) == 1
