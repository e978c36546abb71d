"""The CLI, the committed fixture and the size-targeted benchmark spec."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tracecomm.synth import fsdp_run_of_size, render_rank
from tracecomm.synth.__main__ import main

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
