"""The kernel view across ranks (metrics.md §15–§16): sums of the ranks' own figures, the
roofline against the device's peaks, and the JSON document that carries both."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tracecomm import analyze
from tracecomm.analysis.kernels import _OpSum, _roofline_row
from tracecomm.render import View
from tracecomm.render.formats import render_json
from tracecomm.synth import fsdp_run, write_run
from tracecomm.synth.graphs import graph_replay_run
from tracecomm.synth.shapes import with_shapes

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "tracecomm/schema/report.schema.json").read_text()
)


def test_run_figures_are_the_ranks_summed(tmp_path: Path) -> None:
    write_run(with_shapes(fsdp_run(world_size=2, steps=2, seed=21)), tmp_path / "run")
    report = analyze(tmp_path / "run")
    view = report.kernels
    assert view is not None and view.ranks == 2
    stats = [r.kernels for r in report.ranks]
    assert all(s is not None for s in stats)
    assert view.steps == sum(s.steps for s in stats if s)
    for group in view.groups:
        mine = [
            g
            for s in stats
            if s
            for g in s.groups
            if (g.cls, g.coll_type) == (group.cls, group.coll_type)
        ]
        assert group.total_ns == sum(g.total_ns for g in mine)
        assert group.events == sum(g.events for g in mine)
        for row in group.top:
            listed = [
                (s, r)
                for s in stats
                if s
                for g in s.groups
                if (g.cls, g.coll_type) == (group.cls, group.coll_type)
                for r in g.top
                if r.name == row.name
            ]
            assert row.ranks == len(listed)
            assert row.total_ns == sum(r.total_ns for _, r in listed)
            assert row.count == sum(r.count for _, r in listed)
            assert row.max_ns == max(r.max_ns for _, r in listed)
            assert row.ns_per_step == pytest.approx(row.total_ns / sum(s.steps for s, _ in listed))
    launches = view.launches
    assert launches.host_bound_ns == sum(s.launches.host_bound_ns for s in stats if s)
    assert launches.launches == sum(s.launches.launches for s in stats if s)


def test_roofline_rows_against_the_device_peaks(tmp_path: Path) -> None:
    write_run(with_shapes(fsdp_run(world_size=2, steps=2, seed=22)), tmp_path / "run")
    view = analyze(tmp_path / "run").kernels
    assert view is not None and view.roofline
    for row in view.roofline:
        assert row.device == "NVIDIA H100 80GB HBM3" and row.dtype == "bf16"
        assert (row.peak_tflops, row.peak_gbps) == (989.4, 3350.0)
        assert row.ridge == pytest.approx(989.4e3 / 3350)
        assert row.achieved_tflops is not None and row.ridge is not None
        assert row.achieved_tflops == pytest.approx(row.flops / row.kernel_ns / 1e3)
        assert row.achieved_gbps == pytest.approx(row.bytes / row.kernel_ns)
        assert row.pct_of_peak_flops == pytest.approx(100 * row.achieved_tflops / 989.4)
        assert row.intensity == pytest.approx(row.flops / row.bytes)
        assert row.bound == ("compute" if row.intensity >= row.ridge else "memory")
        assert row.ranks == 2


def test_memory_bound_unknown_device_and_impossible_rows() -> None:
    h100 = "NVIDIA H100 80GB HBM3"
    memory = _roofline_row(
        h100, {}, "aten::mm", "bf16", "[]", _OpSum("matmul", {0}, 1, 10**9, 10**9, 10**6)
    )
    assert memory.bound == "memory" and memory.intensity == 1.0
    assert memory.achieved_gbps == 1000.0 and memory.note is None
    unknown = _roofline_row(
        "NVIDIA Quantum 9000",
        {},
        "aten::mm",
        "bf16",
        "[]",
        _OpSum("matmul", {0}, 1, 10**9, 10**6, 10**6),
    )
    assert unknown.bound is None and unknown.peak_tflops is None and unknown.note
    assert unknown.achieved_tflops == 1.0  # measured even without a peak to compare with
    # 10^15 FLOPs in 1 ms: 10^6 TFLOP/s, more than any device: never printed
    impossible = _roofline_row(
        h100, {}, "aten::mm", "bf16", "[]", _OpSum("matmul", {0}, 1, 10**15, 10**9, 10**6)
    )
    assert impossible.achieved_tflops is None and impossible.pct_of_peak_flops is None
    assert impossible.note is not None and "above the device's peak" in impossible.note


def test_the_document_carries_the_view_and_follows_the_schema(tmp_path: Path) -> None:
    write_run(graph_replay_run(world_size=2, capture_step=True), tmp_path / "run")
    report = analyze(tmp_path / "run")
    doc = json.loads(render_json(report, View()))
    jsonschema.validate(doc, SCHEMA)
    assert doc["kernels"]["graphs"]["replayed"] == sum(
        r["kernels"]["graphs"]["replayed"] for r in doc["ranks"]
    )
    short = doc["ranks"][0]["kernels"]["short"]
    assert short["share_of_kernels_pct"] == pytest.approx(
        100 * short["kernels"] / short["all_kernels"]
    )
