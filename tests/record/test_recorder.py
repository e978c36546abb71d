"""``tracecomm.profile`` in one process: what it writes, and bad use said in one line while the
training loop runs on."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracecomm
from tests.conftest import analyze_json
from tests.record.conftest import need_torch
from tracecomm.ingest.power import load_power_log
from tracecomm.record import TRIGGER_FILE
from tracecomm.run.settings import read_settings


def train(prof: tracecomm.record.Recorder, steps: int, before: dict | None = None) -> None:
    """A small CPU loop; ``before``: step -> what to do before that step runs."""
    import torch

    model = torch.nn.Linear(64, 64)
    for step in range(steps):
        (before or {}).get(step, lambda: None)()
        model(torch.randn(8, 64)).sum().backward()
        prof.step()


def test_import_tracecomm_does_not_import_torch() -> None:
    code = (
        "import sys, tracecomm, tracecomm.record; tracecomm.profile; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_without_torch_one_line_and_the_loop_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    lines: list[str] = []
    with tracecomm.profile(tmp_path / "run", steps=range(1, 3), log=lines.append) as prof:
        for _ in range(4):
            prof.step()
    assert lines == [
        "tracecomm.profile: recording nothing: torch is not installed (pip install torch)"
    ]
    assert prof.step_num == 4 and not (tmp_path / "run").exists()


def test_one_process_records_its_steps_and_settings(tmp_path: Path) -> None:
    need_torch()
    lines: list[str] = []
    run = tmp_path / "run"
    with tracecomm.profile(
        run,
        steps=range(1, 3),
        model_flops_per_step=3.5e9,
        dtype="fp32",
        peak_tflops=1.5,
        framework="Megatron-LM",
        layout={"dp": 1},
        log=lines.append,
    ) as prof:
        train(prof, 5)
    assert sorted(p.name for p in run.iterdir()) == ["rank0.pt.trace.json.gz", "tracecomm.toml"]
    assert lines == [
        f"tracecomm.profile: recorded steps 1–2 of 1 rank into {run} (tracecomm.toml); "
        f"analyze with: tracecomm analyze {run}"
    ]
    settings = read_settings([str(run)])
    assert settings.model.model_flops_per_step == 3_500_000_000
    assert settings.model.dtype == "fp32" and settings.model.peak_tflops == 1.5
    assert settings.run.framework == "megatron" and settings.run.world_size == 1
    assert settings.run.steps == (1, 2) and settings.run.layout == {"dp": 1}
    doc = analyze_json(run)
    assert doc["summary"]["steps"] == [1, 2] and doc["summary"]["ranks_analyzed"] == 1
    # the settings' peak makes MFU; the framework no trace names is the declared one
    assert doc["throughput"]["flops"]["per_step"] == 3_500_000_000
    assert doc["throughput"]["flops"]["source"] == "tracecomm.toml [model] flops_per_step"
    assert doc["throughput"]["mfu"] is not None
    assert doc["frameworks"]["detected"][0]["key"] == "megatron"
    assert doc["frameworks"]["detected"][0]["names"] == ["tracecomm.toml [run] framework"]


def test_a_folder_it_cannot_write_is_one_line(tmp_path: Path) -> None:
    need_torch()
    (tmp_path / "file").write_text("")
    lines: list[str] = []
    with tracecomm.profile(tmp_path / "file" / "run", steps=2, log=lines.append) as prof:
        train(prof, 4)
    assert len(lines) == 1 and lines[0].startswith("tracecomm.profile: recording nothing: ")
    assert f"{tmp_path / 'file' / 'run'} is not writable" in lines[0]
    assert prof.stopped is not None and prof.step_num == 4


def test_steps_that_never_come_are_said(tmp_path: Path) -> None:
    need_torch()
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(50, 52), log=lines.append) as prof:
        train(prof, 5)
    assert lines == [
        "tracecomm.profile: steps 50–51 never came: the loop ran steps 0–4; nothing recorded"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_loop_that_ends_inside_the_window_keeps_what_it_recorded(tmp_path: Path) -> None:
    need_torch()
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(2, 8), log=lines.append) as prof:
        train(prof, 5)
    assert lines[0] == "tracecomm.profile: the loop ended after step 4, inside steps 2–7"
    assert lines[1].startswith(f"tracecomm.profile: recorded steps 2–4 of 1 rank into {tmp_path}")
    assert read_settings([str(tmp_path)]).run.steps == (2, 4)
    # the trace holds the step begun last too (it never ran): the settings' steps leave it out
    assert analyze_json(tmp_path)["summary"]["steps"] == [2, 3, 4]


def test_a_loop_that_ends_in_the_warm_up_leaves_nothing(tmp_path: Path) -> None:
    need_torch()
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(3, 6), power=Steady(), log=lines.append) as prof:
        train(prof, 3)  # steps 0-2: step 2 was the warm-up
    assert lines == [
        "tracecomm.profile: steps 3–5 never came: the loop ran steps 0–2; nothing recorded"
    ]
    assert list(tmp_path.iterdir()) == []  # no trace, no settings, no power log


def test_an_export_that_fails_stops_the_recording_not_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_torch()
    from tracecomm.record import recorder

    def full(source: Path, target: Path) -> None:
        target.write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recorder, "_gzip", full)
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(1, 3), log=lines.append) as prof:
        train(prof, 6)
    assert lines == [
        "tracecomm.profile: recording stopped: OSError: [Errno 28] No space left on device"
    ]
    assert prof.step_num == 6 and list(tmp_path.iterdir()) == []  # no half file left behind


def asked_by_trigger(folder: Path, steps: int, touched: tuple[int, ...]) -> list[str]:
    """On demand, 2 steps at a time, polled every step: the trigger file is touched before
    each step of ``touched``. The helper's lines."""
    need_torch()
    lines: list[str] = []
    trigger = folder / TRIGGER_FILE
    with tracecomm.profile(
        folder, on_demand=True, record_steps=2, poll_every=1, log=lines.append
    ) as prof:
        train(prof, steps, before=dict.fromkeys(touched, trigger.touch))
    return lines


def test_the_trigger_file_records_the_next_steps(tmp_path: Path) -> None:
    lines = asked_by_trigger(tmp_path, 9, (3,))
    trigger = tmp_path / TRIGGER_FILE
    # seen when step 4 begins: warm-up at 5, steps 6-7 recorded into step6/
    assert not trigger.exists()
    assert sorted(p.name for p in (tmp_path / "step6").iterdir()) == [
        "rank0.pt.trace.json.gz",
        "tracecomm.toml",
    ]
    assert lines == [
        f"tracecomm.profile: recorded steps 6–7 of 1 rank into {tmp_path / 'step6'} "
        f"(tracecomm.toml); analyze with: tracecomm analyze {tmp_path / 'step6'}"
    ]
    assert analyze_json(tmp_path / "step6")["summary"]["steps"] == [6, 7]


def test_on_demand_records_each_time_it_is_asked(tmp_path: Path) -> None:
    lines = asked_by_trigger(tmp_path, 16, (3, 9))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step12", "step6"]
    assert [analyze_json(tmp_path / f)["summary"]["steps"] for f in ("step6", "step12")] == [
        [6, 7],
        [12, 13],
    ]
    assert len(lines) == 2


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"steps": [1, 3]}, "one run of consecutive steps"),
        ({"steps": range(0)}, "no step to record"),
        ({"steps": 0}, "a positive count of steps"),
        ({"framework": "keras"}, "framework='keras': one of vllm, sglang"),
        ({"layout": {"d p": 2}}, "parallel dimensions and their sizes"),
        ({"layout": {"dp": 0}}, "parallel dimensions and their sizes"),
        ({"model_flops_per_step": -1}, "must be a positive number"),
        ({"dtype": "fp7"}, "dtype 'fp7': one of"),
        ({"on_demand": True, "poll_every": 0}, "positive counts of steps"),
        ({"on_demand": True, "record_steps": None}, "positive counts of steps"),
        ({"model_flops_per_step": float("nan")}, "must be a positive number"),
        ({"model_flops_per_step": float("inf")}, "must be a positive number"),
        ({"framework": 3}, "framework=3: one of"),
        ({"layout": [("dp", 2)]}, "parallel dimensions and their sizes"),
        ({"tokens_per_step": 2**64}, "past a 64-bit count"),
    ],
)
def test_bad_arguments_are_one_line_and_record_nothing(
    tmp_path: Path, options: dict, said: str
) -> None:
    lines: list[str] = []
    with tracecomm.profile(tmp_path / "run", log=lines.append, **options) as prof:
        for _ in range(3):
            prof.step()
    assert len(lines) == 1 and lines[0].startswith("tracecomm.profile: recording nothing: ")
    assert said in lines[0]
    assert not (tmp_path / "run").exists()


class Steady:
    """An injected NVML stand-in: two GPUs at 200 W and 210 W."""

    def gpus(self) -> list[int]:
        return [0, 1]

    def watts(self, gpu: int) -> float:
        return 200.0 + 10 * gpu

    def close(self) -> None:
        pass


def test_power_samples_cover_the_recorded_steps(tmp_path: Path) -> None:
    need_torch()
    import socket

    lines: list[str] = []
    with tracecomm.profile(
        tmp_path, steps=range(2, 4), power=Steady(), power_period_s=0.01, log=lines.append
    ) as prof:
        train(prof, 6)
    host = socket.gethostname()
    log = tmp_path / f"power.{host}.csv"
    assert f"(tracecomm.toml, power.{host}.csv)" in lines[-1]
    series = load_power_log(log).series[host]
    assert sorted(series) == [0, 1] and set(series[1].watts.tolist()) == {210.0}
    with gzip.open(tmp_path / "rank0.pt.trace.json.gz", "rt") as handle:
        trace = json.load(handle)
    base = trace.get("baseTimeNanoseconds", 0)
    spans = [
        (base + float(e["ts"]) * 1000, base + (float(e["ts"]) + float(e["dur"])) * 1000)
        for e in trace["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    first, last = series[0].span
    assert first <= min(s for s, _ in spans) and last >= max(e for _, e in spans)


def test_power_without_nvml_is_one_line_and_the_recording_goes_on(tmp_path: Path) -> None:
    need_torch()
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(1, 3), power=True, log=lines.append) as prof:
        train(prof, 4)
    # no driver here: nvidia-ml-py absent, or NVML's library not found
    assert lines[0].startswith("tracecomm.profile: no power log: ")
    assert (tmp_path / "rank0.pt.trace.json.gz").is_file() and len(lines) == 2


def test_the_nccl_environment_is_set_before_the_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_torch()
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the job's own choice stays
    for name in ("NCCL_DEBUG_FILE", "TORCH_FR_DUMP_TEMP_FILE"):
        monkeypatch.delenv(name, raising=False)
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(1, 2), log=lines.append) as prof:
        train(prof, 3)
    assert os.environ["NCCL_DEBUG"] == "WARN"
    assert os.environ["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl.%h.%p.log")
    assert os.environ["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "nccl_trace_rank_")
    assert len(lines) == 1  # set silently: only the recording's line


def test_after_an_nccl_process_group_rank_0_says_what_the_launcher_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_torch()
    from tracecomm.record import recorder
    from tracecomm.record.world import World

    late = World(0, 2, 0, "node0", "nccl", True)
    monkeypatch.setattr(recorder, "this_world", lambda dist: late)
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(1, 2), log=lines.append) as prof:
        train(prof, 3)
    assert "NCCL_DEBUG" not in os.environ  # too late to take effect: not set
    assert lines[0].startswith(
        "tracecomm.profile: rank 0: NCCL log and Flight Recorder: the process group exists "
        "already; set in the launcher's environment (docs/record.md): NCCL_DEBUG=INFO "
    )
    assert f"NCCL_DEBUG_FILE={tmp_path}/nccl.%h.%p.log" in lines[0]


def test_an_abandon_that_fails_too_stays_out_of_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_torch()
    from tracecomm.record import recorder

    class Closing(Steady):
        def close(self) -> None:
            raise RuntimeError("NVML_ERROR_UNINITIALIZED")

    def full(source: Path, target: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recorder, "_gzip", full)
    lines: list[str] = []
    with tracecomm.profile(tmp_path, steps=range(1, 3), power=Closing(), log=lines.append) as prof:
        train(prof, 5)
    assert lines[0] == (
        "tracecomm.profile: recording stopped: OSError: [Errno 28] No space left on device"
    )
    assert prof.step_num == 5 and list(tmp_path.iterdir()) == []


def test_a_recorder_records_once(tmp_path: Path) -> None:
    need_torch()
    lines: list[str] = []
    prof = tracecomm.profile(tmp_path, steps=range(1, 2), log=lines.append)
    with prof:
        train(prof, 3)
    with prof:
        train(prof, 3)
    assert lines[-1] == (
        "tracecomm.profile: a recorder records once: make a new tracecomm.profile for more"
    )
    assert len(prof.recorded) == 1


def test_a_trigger_file_from_before_the_start_is_not_a_request(tmp_path: Path) -> None:
    need_torch()
    (tmp_path / TRIGGER_FILE).touch()
    os.utime(tmp_path / TRIGGER_FILE, (1, 1))  # left by an earlier job
    lines: list[str] = []
    with tracecomm.profile(
        tmp_path, on_demand=True, record_steps=1, poll_every=1, log=lines.append
    ) as prof:
        train(prof, 5)
    assert lines == [] and sorted(p.name for p in tmp_path.iterdir()) == [TRIGGER_FILE]
