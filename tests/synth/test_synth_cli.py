"""The CLI, the committed fixture and the size-targeted benchmark spec."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tracecomm.synth import fsdp_run_of_size, render_rank
from tracecomm.synth.__main__ import _parser, _spec, main
from tracecomm.synth.schedule import RunSpec

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sample-run"
# Must stay the command written in fixtures/README.md.
FIXTURE_ARGS = ["--ranks", "8", "--steps", "4", "--seed", "0"]


def test_fixture_matches_a_fresh_generation(tmp_path: Path) -> None:
    assert main([str(tmp_path), *FIXTURE_ARGS]) == 0
    fresh = sorted(p.name for p in tmp_path.iterdir())
    assert fresh == sorted(p.name for p in FIXTURE.iterdir())
    for name in fresh:
        # Compared after decompression: the gzip stream itself may differ between zlib builds.
        want = gzip.decompress((FIXTURE / name).read_bytes())
        assert gzip.decompress((tmp_path / name).read_bytes()) == want, name


def test_readme_states_the_fixture_command() -> None:
    readme = (FIXTURE.parent / "README.md").read_text()
    assert "python -m tracecomm.synth fixtures/sample-run " + " ".join(FIXTURE_ARGS) in readme


def test_cli_refuses_non_empty_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("x")
    assert main([str(tmp_path), "--ranks", "1", "--steps", "1", "--layers", "1"]) == 2
    assert "not empty" in capsys.readouterr().err
    args = [str(tmp_path), "--ranks", "2", "--steps", "1", "--layers", "1", "--no-gzip", "--force"]
    assert main(args) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "rank1.pt.trace.json" in lines[1]
    assert (tmp_path / "rank0.pt.trace.json").exists()


def test_cli_options(tmp_path: Path) -> None:
    args = ["--ranks", "2", "--steps", "1", "--layers", "1", "--naming", "legacy"]
    assert main([str(tmp_path), *args, "--time-format", "epoch_us", "--no-gzip"]) == 0
    text = (tmp_path / "rank1.pt.trace.json").read_text()
    assert "ncclKernel_AllGather" in text and "baseTimeNanoseconds" not in text


@pytest.mark.parametrize("target_mb", [1.5, 4.0])
def test_size_target(target_mb: float) -> None:
    spec = fsdp_run_of_size(target_mb, world_size=4)
    size = sum(len(chunk.encode()) for chunk in render_rank(spec, spec.ranks[0]))
    assert 0.8 * target_mb * 1e6 <= size <= 1.2 * target_mb * 1e6


def _spec_of(*flags: str) -> RunSpec:
    return _spec(_parser().parse_args(["out", *flags]))


def _compute_ns(spec: RunSpec, rank: int) -> int:
    return sum(op.dur_ns for op in spec.ranks[rank].all_ops() if op.kind == "compute")


def _comm_ns(spec: RunSpec, coll: str) -> int:
    return sum(op.dur_ns for op in spec.ranks[0].all_ops() if op.kind == "comm" and op.coll == coll)


def test_scenario_flags_change_what_they_say() -> None:
    healthy = _spec_of("--healthy")
    computes = {_compute_ns(healthy, r) for r in range(8)}
    assert max(computes) < 1.01 * min(computes)  # every rank on par (jitter aside)
    slow = _spec_of("--healthy", "--straggler", "5:0.2")
    assert _compute_ns(slow, 5) > 1.15 * _compute_ns(slow, 4)
    # one collective type slower, the others as they were
    ag = _spec_of("--healthy", "--slower-collective", "AllGather=3")
    assert _comm_ns(ag, "AllGather") > 2.5 * _comm_ns(healthy, "AllGather")
    # (a kernel's duration includes its wait for the other members, so only about the same)
    rs = _comm_ns(ag, "ReduceScatter") / _comm_ns(healthy, "ReduceScatter")
    assert 0.85 < rs < 1.15
    base = _spec_of("--no-straggler")
    assert _comm_ns(healthy, "AllGather") < 0.3 * _comm_ns(base, "AllGather")
    offsets = _spec_of("--ranks", "16", "--clock-offsets", "0,2.5")
    assert offsets.host_offsets_ns == {"node0": 0, "node1": 2_500_000}
    pp = _spec_of("--layout", "dp-pp", "--dp", "1", "--pp", "4", "--imbalanced-stage", "2:2")
    assert _compute_ns(pp, 2) > 1.8 * _compute_ns(pp, 1)
    dptp = _spec_of("--layout", "dp-tp", "--dp", "2", "--tp", "2")
    assert dptp.world_size == 4


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--layout", "dp-pp", "--host-bound", "90"], "--host-bound: fsdp layout only"),
        (["--imbalanced-stage", "1:2"], "dp-pp layout only"),
        (["--slower-collective", "Gather=2"], "TYPE=FACTOR"),
        (["--slower-network", "0"], "FACTOR must be > 0"),
    ],
)
def test_scenario_flags_refuse_what_cannot_be_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main([str(tmp_path / "out"), *flags]) == 2
    assert message in capsys.readouterr().err


def test_family_writes_the_job_and_its_counterfactual(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job, fixed = tmp_path / "job", tmp_path / "fixed"
    args = [str(job), "--family", "slow-node", "--counterfactual", str(fixed)]
    assert main(args) == 0
    assert "the cause: ranks [0, 2]" in capsys.readouterr().err
    names = sorted(p.name for p in job.iterdir())
    assert len(names) == 8 and names == sorted(p.name for p in fixed.iterdir())
    # the same ranks and files; the slow node's kernels (and everyone's waits) differ
    assert (job / names[0]).read_bytes() != (fixed / names[0]).read_bytes()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--counterfactual", "x"], "--counterfactual needs --family"),
        (["--family", "slow-tp-peer", "--ranks", "3"], "no DP × TP layout"),
        (["--family", "fsdp", "--slowdown", "0"], "slowdown 0.0 is not in (0, 10]"),
    ],
)
def test_family_refuses_what_cannot_be_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert main([str(tmp_path / "out"), *args]) == 2
    assert says in capsys.readouterr().err
