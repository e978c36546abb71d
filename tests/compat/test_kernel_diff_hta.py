"""The diff by kernel (metrics.md §18) against HTA 0.6.1's ``TraceDiff`` on a shared trace:
HTA compares one iteration of one rank; the Report's kernel table holds each included step of
the median rank, so step by step the two must list the same GPU kernels with the same calls
and durations (HTA in µs, a float; ours in integer ns), and a run against itself changes
nothing in either."""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

import pytest

from tracecomm import analyze
from tracecomm.analysis.compare import compare
from tracecomm.analysis.runrecord import record_of_report

TRACE = "hta-trace_diff_control"


def test_kernel_table_agrees_with_hta_trace_diff(shared_traces: Path) -> None:
    trace_diff = pytest.importorskip("hta.trace_diff")
    folder = shared_traces / TRACE
    if not folder.is_dir():
        pytest.skip(f"{TRACE} is not among the shared traces")
    report = analyze(folder)
    table = report.kernel_steps
    assert table is not None and table.kernels
    record = record_of_report(report, "control")
    (pair,) = compare([record, record]).pairs
    assert pair.kernels.missing is None and pair.kernels.changes == ()
    for i, step in enumerate(table.steps[:2]):
        quiet = io.StringIO()
        logging.disable(logging.CRITICAL)
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                hta = trace_diff.TraceDiff.compare_traces(
                    str(folder),
                    str(folder),
                    control_rank=table.rank,
                    test_rank=table.rank,
                    control_iteration=step,
                    test_iteration=step,
                    device_type=trace_diff.DeviceType.GPU,
                ).reset_index()
        finally:
            logging.disable(logging.NOTSET)
        assert ((hta["diff_counts"] == 0) & (hta["diff_duration"] == 0)).all()
        theirs = {
            row["name"]: (int(row["Control_counts"]), float(row["Control_total_duration"]))
            for _, row in hta.iterrows()
        }
        ours = {k.name: (k.calls[i], k.time_ns[i]) for k in table.kernels if k.calls[i]}
        assert ours.keys() == theirs.keys()
        for name, (calls, ns) in ours.items():
            assert calls == theirs[name][0], name
            assert ns / 1e3 == pytest.approx(theirs[name][1], rel=0.01, abs=0.001), name
