"""Scaling projection (metrics.md §11): fitted on a run generated at N = 64 from a known
alpha-beta network, checked against runs generated at other sizes from the same network."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import NamedTuple

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, SAMPLE_RUN
from tracecomm import analyze
from tracecomm.analysis.projection import LinkFit, ProjectedSize
from tracecomm.cli import EXIT_NO_INPUT, EXIT_OK, app
from tracecomm.engine import breakdown
from tracecomm.ingest import load_rank
from tracecomm.synth.scaling import Network, scaling_run
from tracecomm.synth.schedule import RunSpec
from tracecomm.synth.writer import write_run

runner = CliRunner()
SCHEMA = json.loads((REPO / "tracecomm/schema/report.schema.json").read_text())
LATENCY_BOUND = Network(alpha_us=20.0, bus_gbps=200.0)
MIXED = Network(alpha_us=0.5, bus_gbps=50.0)
BANDWIDTH_BOUND = Network(alpha_us=0.0, bus_gbps=100.0)


class Made(NamedTuple):
    """A projection that was made (no reason): its fields, none of them null."""

    fits: tuple[LinkFit, ...]
    sizes: tuple[ProjectedSize, ...]
    step: int
    scaling: str
    turning_point: int | None


def projected(tmp: Path, network: Network, targets: tuple[int, ...], weak: bool = False) -> Made:
    write_run(scaling_run(64, network, weak=weak), tmp)
    p = analyze(tmp, to=targets, weak=weak).projection
    assert p is not None and p.reason is None, p
    assert p.fits is not None and p.sizes is not None and p.step is not None
    assert p.scaling is not None
    return Made(p.fits, p.sizes, p.step, p.scaling, p.turning_point)


@cache
def truth(
    world: int, network: Network, step: int, weak: bool, tmp: Path
) -> tuple[int, dict[str, int]]:
    """Step window and exposed comm per type of one rank of a run generated at ``world``."""
    spec = scaling_run(world, network, weak=weak)
    write_run(RunSpec(world, spec.ranks[:1], spec.gzip), tmp)  # ranks are alike: one is enough
    result = breakdown(load_rank(next(tmp.iterdir())))
    window = next(s.window for s in result.included_steps if s.step == step)
    assert window is not None
    return window.figures.window_ns, {t.coll_type: t.exposed_comm_ns for t in window.by_type}


@pytest.mark.parametrize("network", [LATENCY_BOUND, MIXED], ids=["latency", "mixed"])
def test_fit_and_projection_to_512(tmp_path: Path, network: Network) -> None:
    p = projected(tmp_path / "n64", network, (512,))
    for fit in p.fits:
        assert fit.alpha_ns == pytest.approx(network.alpha_us * 1000, rel=0.05), fit
        assert fit.bus_gbps == pytest.approx(network.bus_gbps, rel=0.05), fit
    assert {f.coll_type for f in p.fits} == {"AllGather", "ReduceScatter", "AllReduce"}
    measured, at_512 = p.sizes
    # the measured size replayed with the fitted network reproduces the step
    step_64, _ = truth(64, network, p.step, False, tmp_path / "t64")
    assert measured.world_size == 64
    assert measured.step_ns == pytest.approx(step_64, rel=1e-3)
    step_512, exposed_512 = truth(512, network, p.step, False, tmp_path / "t512")
    assert at_512.world_size == 512
    assert set(at_512.exposed_comm_ns) == set(exposed_512)
    for coll_type, ns in exposed_512.items():
        assert at_512.exposed_comm_ns[coll_type] == pytest.approx(ns, rel=0.05), coll_type
    assert at_512.step_ns == pytest.approx(step_512, rel=0.05)


def test_weak_scaling_keeps_compute_and_shards(tmp_path: Path) -> None:
    p = projected(tmp_path / "n64", MIXED, (256,), weak=True)
    assert p.scaling == "weak"
    measured, at_256 = p.sizes
    assert at_256.compute_ns == pytest.approx(measured.compute_ns, rel=1e-6)
    _, exposed = truth(256, MIXED, p.step, True, tmp_path / "t256")
    for coll_type, ns in exposed.items():
        assert at_256.exposed_comm_ns[coll_type] == pytest.approx(ns, rel=0.05, abs=20_000)
    # weak scaling: the global batch grows with the world
    assert at_256.relative_throughput == pytest.approx(4 * measured.step_ns / at_256.step_ns)


def test_turning_point_only_when_latency_bound(tmp_path: Path) -> None:
    sizes = (32, 128, 256, 512, 1024)
    latency = projected(tmp_path / "a", LATENCY_BOUND, sizes)
    # the 128 -> 2,048 shape: from 64 GPUs on, more GPUs make the step longer
    assert latency.turning_point == 64
    throughput = [s.relative_throughput for s in sorted(latency.sizes, key=lambda s: s.world_size)]
    assert throughput.index(max(throughput)) == 1
    assert throughput[1:] == sorted(throughput[1:], reverse=True)
    bandwidth = projected(tmp_path / "b", BANDWIDTH_BOUND, sizes)
    assert bandwidth.turning_point is None
    steps = [s.step_ns for s in sorted(bandwidth.sizes, key=lambda s: s.world_size)]
    assert steps == sorted(steps, reverse=True)


def test_project_command_json_and_terminal(tmp_path: Path) -> None:
    write_run(scaling_run(16, LATENCY_BOUND, base_world=16, steps=2), tmp_path)
    result = runner.invoke(app, ["project", str(tmp_path), "--to", "32,64", "-f", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert [s["world_size"] for s in doc["projection"]["sizes"]] == [16, 32, 64]
    peak = doc["projection"]["turning_point"]
    assert peak in (16, 32)
    text = runner.invoke(app, ["project", str(tmp_path), "--to", "32,64"]).stdout
    assert f"throughput peaks at {peak} GPUs" in text and "alpha 20.000 µs per hop" in text
    plain = runner.invoke(app, ["analyze", str(tmp_path), "-f", "json"])
    assert json.loads(plain.stdout)["projection"] is None
    bad = runner.invoke(app, ["project", str(tmp_path), "--to", "0,64"])
    assert bad.exit_code == 2 and "--to" in bad.stderr


def test_no_projection_without_sized_collectives(tmp_path: Path) -> None:
    result = runner.invoke(app, ["project", str(REPO / "fixtures" / "gloo-run")])
    assert result.exit_code == EXIT_NO_INPUT
    assert "no collective to fit" in result.stdout
    doc = json.loads(
        runner.invoke(
            app, ["analyze", str(REPO / "fixtures" / "gloo-run"), "-f", "json", "--project"]
        ).stdout
    )
    jsonschema.validate(doc, SCHEMA)
    assert doc["projection"]["reason"].startswith("no collective to fit")


def test_one_message_size_is_labelled(tmp_path: Path) -> None:
    doc = json.loads(
        runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json", "--project"]).stdout
    )
    jsonschema.validate(doc, SCHEMA)
    notes = doc["projection"]["notes"]
    assert any("one large message size" in n for n in notes)
    assert doc["projection"]["sizes"][0]["world_size"] == 8
