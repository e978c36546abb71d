"""The guide's "Record a run" examples (docs/record.md), run as written: the helper's and plain
torch.profiler's give traces of steps 10-13 that analyze reads."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from tests.conftest import REPO, analyze_json
from tests.record.conftest import need_torch


def recording_examples() -> list[str]:
    page = (REPO / "docs" / "record.md").read_text()
    return re.findall(r"```python\n(.*?)```", page, re.S)


@pytest.mark.parametrize("example", [0, 1], ids=["tracecomm.profile", "torch.profiler"])
def test_the_readme_examples_record_steps_10_to_13(
    example: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_torch()
    import torch

    code = recording_examples()[example]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    model = torch.nn.Linear(32, 32)
    names = {
        "loader": range(16),
        "train_step": lambda batch: model(torch.randn(4, 32)).sum().backward(),
        "n_params": 32 * 33,
        "tokens_per_step": 4,
    }
    with warnings.catch_warnings():  # CUDA asked for on a CPU build: torch warns
        warnings.simplefilter("ignore")
        exec(compile(code, f"README example {example}", "exec"), names)
    doc = analyze_json(tmp_path / "run")
    assert doc["summary"]["ranks_analyzed"] == 1 and doc["summary"]["steps"] == [10, 11, 12, 13]
    assert (tmp_path / "run" / "rank0.pt.trace.json.gz").is_file()
    if example == 0:  # the helper's settings give analyze the FLOPs
        assert doc["throughput"]["flops"]["per_step"] == 6 * 32 * 33 * 4
