"""NCCL's NVTX payloads in Nsight Systems exports (ingest.nccl_nvtx, metrics.md §1b): the JSON
and binary forms, crafted payloads, ranks from ncclCommInitRank, steps from NVTX ranges."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import analyze_json
from tracecomm.cli.app import app
from tracecomm.ingest.nccl_nvtx import _blob_fields, _Entry, _json_fields
from tracecomm.ingest.nsys import load_nsys
from tracecomm.ingest.options import ReadOptions


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ('{"NCCL communicator ID": 7, "Message size [bytes]": 4096, "Peer rank": 3}',
         {"comm": 7, "bytes": 4096, "peer": 3}),
        # numbers as text, hex ids, other spellings of the names
        ('{"nccl communicator id": "0xff", "message size (bytes)": "512"}',
         {"comm": 255, "bytes": 512}),
        # nested, and as name / value pairs
        ('{"payload": {"No. of ranks": 8, "Rank": 5}}', {"nranks": 8, "comm_rank": 5}),
        ('[{"name": "Root", "value": 0}, {"name": "Message size [bytes]", "value": 64}]',
         {"root": 0, "bytes": 64}),
        # what is no number is left out: booleans, floats, past u64, not JSON at all
        ('{"Rank": true, "Root": 1.5, "Message size [bytes]": 36893488147419103232}', {}),
        ("not json {", {}),
        ("[" * 10_000 + "]" * 10_000, {}),
    ],
)  # fmt: skip
def test_json_payload_fields(text: str, fields: dict[str, int]) -> None:
    assert _json_fields(text) == fields


def _blob(domain: int, schema: int, payload: bytes, offset: int = 32) -> bytes:
    return struct.pack("<QQQQ", domain, schema, len(payload), offset) + payload


_SEND = {(1, 9): [_Entry("comm", 0, "<Q"), _Entry("bytes", 8, "<Q"), _Entry("peer", 16, "<i")]}


def test_binary_payload_fields() -> None:
    body = struct.pack("<QQi4x", 0xDEADBEEF, 1 << 20, 6)
    want = {"comm": 0xDEADBEEF, "bytes": 1 << 20, "peer": 6}
    assert _blob_fields(_blob(1, 9, body), _SEND) == want
    assert _blob_fields(_blob(1, 9, body).hex(), _SEND) == want  # exported as hex text
    assert _blob_fields(_blob(4, 9, body), _SEND) == want  # a domain numbered apart: by schema
    # a short payload keeps the entries it holds; nonsense is nothing
    assert _blob_fields(_blob(1, 9, body[:12]), _SEND) == {"comm": 0xDEADBEEF}
    assert _blob_fields(_blob(1, 5, body), _SEND) == {}
    assert _blob_fields(_blob(1, 9, body, offset=1 << 40), _SEND) == {}
    assert _blob_fields(b"\x01\x02", _SEND) == {}
    assert _blob_fields("zz not hex", _SEND) == {}


def _generated(tmp_path: Path, layout: str, **kw: object) -> tuple[object, Path]:
    from tracecomm.synth.__main__ import _parser, _spec
    from tracecomm.synth.nsys import write_nsys_run

    spec = _spec(_parser().parse_args([str(tmp_path / "x"), *layout.split()]))
    write_nsys_run(spec, tmp_path / "n", **kw)  # type: ignore[arg-type]
    return spec, tmp_path / "n"


def test_the_global_rank_is_the_rank_in_the_world_communicator(tmp_path: Path) -> None:
    """ncclCommInitRank's payload outranks the launcher's environment; without it the
    environment is read again."""
    _, run = _generated(tmp_path, "--ranks 4 --steps 2", per_node=True)
    (export,) = run.iterdir()
    with sqlite3.connect(export) as db:  # every process claims rank 7
        db.execute("UPDATE META_DATA_CAPTURE SET value = 'RANK=7' WHERE value LIKE 'RANK=%'")
    assert [e.meta.rank for e in load_nsys(export)] == [0, 1, 2, 3]
    with sqlite3.connect(export) as db:
        db.execute("UPDATE NVTX_EVENTS SET jsonText = NULL")
    ranks = [e.meta.rank for e in load_nsys(export)]
    assert ranks == [7, 7, 7, 7]


def test_a_cut_export_finds_ncclds_domain_by_its_calls(tmp_path: Path) -> None:
    """An export cut to a window loses the domain's creation row: NCCL's domain is the one
    whose every range is an nccl* call, and its payloads still count."""
    _, run = _generated(tmp_path, "--ranks 2 --steps 2")
    for export in run.iterdir():
        with sqlite3.connect(export) as db:
            db.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 75")
    doc = analyze_json(run)
    assert doc["bandwidth"]["measured"] > 0 and doc["bandwidth"]["without_size"] == 0


def _renamed_steps(run: Path, template: str) -> None:
    """The PyTorch profiler's step ranges renamed as a training loop's own (``{n}``)."""
    for export in run.iterdir():
        with sqlite3.connect(export) as db:
            rows = db.execute(
                "SELECT rowid, text FROM NVTX_EVENTS WHERE text LIKE 'ProfilerStep#%'"
            ).fetchall()
            for rowid, text in rows:
                number = text.split(",")[0].removeprefix("ProfilerStep#")
                db.execute(
                    "UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                    (template.format(n=number), rowid),
                )


@pytest.mark.parametrize("template", ["iteration {n}", "train_step", "Step#{n}"])
def test_steps_from_a_training_loops_ranges(tmp_path: Path, template: str) -> None:
    """Without ProfilerStep#N the default step names mark the steps: the same step times,
    numbered by the name's number, else in order from 0."""
    spec, run = _generated(tmp_path, "--ranks 2 --steps 3")
    before = analyze_json(run)
    _renamed_steps(run, template)
    after = analyze_json(run)
    numbers = [s.number for s in spec.ranks[0].steps]  # type: ignore[attr-defined]
    want = numbers if "{n}" in template else list(range(len(numbers)))
    for b, a in zip(before["ranks"], after["ranks"], strict=True):
        assert [s["step"] for s in a["steps"]] == want
        assert [s["window"] for s in a["steps"]] == [s["window"] for s in b["steps"]]
    assert any("default step names" in w for w in after["warnings"])


def test_a_step_range_the_user_names(tmp_path: Path) -> None:
    spec, run = _generated(tmp_path, "--ranks 2 --steps 3")
    _renamed_steps(run, "fwd-bwd-opt {n} of epoch 0")
    assert all(not r["steps"] for r in analyze_json(run)["ranks"])
    result = CliRunner().invoke(
        app, ["analyze", str(run), "-f", "json", "--step-range", r"^fwd-bwd-opt (\d+) of"]
    )
    assert result.exit_code == 0, result.stderr
    numbers = [s.number for s in spec.ranks[0].steps]  # type: ignore[attr-defined]
    assert "--step-range" in result.stderr
    import json

    assert [s["step"] for s in json.loads(result.stdout)["ranks"][0]["steps"]] == numbers
    bad = CliRunner().invoke(app, ["analyze", str(run), "--step-range", "(?<=x)y"])
    assert bad.exit_code == 2 and "--step-range" in bad.stderr


def test_a_step_range_replaces_the_profilers_steps(tmp_path: Path) -> None:
    """Asked for, the user's ranges are the steps even beside ProfilerStep#N."""
    _, run = _generated(tmp_path, "--ranks 1 --steps 3")
    (export,) = run.iterdir()
    (events,) = load_nsys(export, ReadOptions(step_range=r"^aten::|^c10d::"))
    assert events.steps.height > 3


def test_event_types_are_read_from_the_exports_enum(tmp_path: Path) -> None:
    """An export that numbers NVTX ranges apart (its ENUM_NSYS_EVENT_TYPE says how) reads as
    one that numbers them as today's releases do."""
    _, run = _generated(tmp_path, "--ranks 2 --steps 2")
    before = analyze_json(run)
    for export in run.iterdir():
        with sqlite3.connect(export) as db:
            for name, old, new in (("NvtxPushPopRange", 59, 500), ("NvtxDomainCreate", 75, 501)):
                db.execute("UPDATE ENUM_NSYS_EVENT_TYPE SET id = ? WHERE name = ?", (new, name))
                db.execute("UPDATE NVTX_EVENTS SET eventType = ? WHERE eventType = ?", (new, old))
    after = analyze_json(run)
    assert after["ranks"] == before["ranks"] and after["bandwidth"] == before["bandwidth"]
    assert after["ranks"][0]["steps"]
