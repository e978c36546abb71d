"""The terminal report fits the width asked without cutting a number (issue 34): every line at
most that wide, and no figure ends in an ellipsis (rich's way of shrinking a table)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN, SHARED_TRACES, analyze_json
from tracecomm.cli import app
from tracecomm.render.fit import FitTable

# a figure cut short: a cell that is digits and separators up to an ellipsis (a kernel name
# shortened after a template argument, "float16, 1…", is a label the section abbreviates)
CUT_NUMBER = re.compile(r"(?:^|[\s│┃])[-+]?\d[\d,.]*…")
SHARED_NSYS = SHARED_TRACES.parent / "nsys"
PARTS = ("window_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")


def rendered(table: FitTable, width: int) -> list[str]:
    console = Console(width=width, no_color=True, file=io.StringIO())
    console.print(table)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def kernel_table() -> FitTable:
    table = FitTable(title="kernels")
    table.add_column("Kernel")
    for i in range(6):
        table.add_column(f"Compute ratio {i}", justify="right")
    table.add_row("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", *["2,090.123"] * 6)
    table.add_row("gemm", *["81.1"] * 5, "5 (2.9%)")
    return table


@pytest.mark.parametrize("width", [140, 100, 72, 40])
def test_numbers_are_never_cut(width: int) -> None:
    lines = rendered(kernel_table(), width)
    text = "\n".join(lines)
    assert all(len(line) <= width for line in lines)
    assert not CUT_NUMBER.search(text) and "…" not in text
    if width >= 72:  # they fit: every number whole on its line
        assert sum(line.count("2,090.123") for line in lines) == 6
    # the label folds onto lines of its own: nothing of it is lost
    assert "4096ul>)" in text.replace("\n", "").replace(" ", "").replace("│", "")


def test_a_table_that_fits_keeps_its_frame() -> None:
    lines = rendered(kernel_table(), 140)
    assert lines[1].startswith("┏")


def trace_inputs() -> list[Path]:
    found = [SAMPLE_RUN]
    if SHARED_TRACES.is_dir():
        found += sorted(p for p in SHARED_TRACES.iterdir() if p.is_dir())
    if SHARED_NSYS.is_dir():
        found += sorted(SHARED_NSYS.glob("*.sqlite"))
    return found


@pytest.mark.parametrize("path", trace_inputs(), ids=lambda p: p.name)
def test_the_report_fits_the_width_asked(path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", str(path)], env={"COLUMNS": "100"})
    assert result.exit_code in (0, 4), result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(len(line) <= 100 for line in lines), path


@pytest.mark.parametrize("width", [100, 140])
@pytest.mark.parametrize("name", ["sample-run", "bytedance-straggler-SE"])
def test_the_figures_of_the_tables_are_whole(name: str, width: int) -> None:
    path = SAMPLE_RUN if name == "sample-run" else SHARED_TRACES / name
    if not path.is_dir():
        pytest.skip("../shared/data/traces is not present")
    doc = analyze_json(path)
    text = CliRunner().invoke(app, ["analyze", str(path)], env={"COLUMNS": str(width)}).stdout
    assert not CUT_NUMBER.search(text)
    table = text.split("Per rank, its mean step (ms)")[1].split("\n\n")[0]
    cells = [line.replace("│", " ").split() for line in table.splitlines()]
    rows = {int(c[0].rstrip("*")): c for c in cells if len(c) == 10 and c[0].rstrip("*").isdigit()}
    assert rows
    for rank in doc["ranks"]:
        if rank["rank"] in rows:  # the slowest 24 of a large run
            mean = rank["step_mean"]
            assert rows[rank["rank"]][2:8] == [f"{mean[key] / 1e6:,.3f}" for key in PARTS]
    top = doc["stragglers"]["ranks"][0]
    assert f"{top['root_delay_ns'] / 1e6:,.3f}" in text
