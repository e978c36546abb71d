"""Bandwidth (metrics.md §7) on a jitter-free generated run: bytes from the schedule's message
sizes, transfer time from its true clock."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app
from tracecomm.synth import expected_instances, fsdp_run, write_run

ELEMENT = {"AllGather": 2, "ReduceScatter": 2, "AllReduce": 4}  # BFloat16, BFloat16, Float


def test_bandwidth_matches_the_schedule(tmp_path: Path) -> None:
    spec = fsdp_run(world_size=8, steps=3, seed=2, jitter=0.0, host_offsets_ns=[7_000_000])
    write_run(spec, tmp_path)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path), "-f", "json", "--link-gbps", "800"])
    assert result.exit_code == EXIT_OK, result.stderr
    bw = json.loads(result.stdout)["bandwidth"]
    n = 8
    # the per-rank input count of each instance, as the generator scheduled it
    nelems = {(op.pg or "0", op.seq): op.nelems for op in spec.ranks[0].all_ops() if op.seq}
    expected: dict[str, list[tuple[float, float]]] = {}
    for inst in expected_instances(spec):
        elems = nelems[(inst.group, inst.seq)] * (n if inst.coll_type == "AllGather" else 1)
        nbytes = elems * ELEMENT[inst.coll_type]
        algbw = nbytes / inst.transfer_ns
        factor = {"AllReduce": 2 * (n - 1) / n}.get(inst.coll_type, (n - 1) / n)
        expected.setdefault(inst.coll_type, []).append((algbw, algbw * factor))
    rows = {r["coll_type"]: r for r in bw["rows"]}
    assert set(rows) == set(expected) and bw["without_size"] == 0
    for coll, values in expected.items():
        assert rows[coll]["instances"] == len(values)
        assert rows[coll]["algbw_gbps"] == pytest.approx(statistics.median(a for a, _ in values))
        assert rows[coll]["busbw_gbps"] == pytest.approx(statistics.median(b for _, b in values))
        # waiting makes the kernel-duration variant lower, never higher
        assert rows[coll]["busbw_incl_wait_gbps"] <= rows[coll]["busbw_gbps"] + 1e-9
    assert rows["AllReduce"]["size_bucket"] == "< 64 KiB"
    assert rows["AllReduce"]["below_link_pct"] == 100.0  # 4 bytes never reach 100 GB/s
    assert rows["AllGather"]["size_bucket"] == "16–256 MiB"
