"""Nsight Systems SQLite exports (ingest.nsys, metrics.md §1b) on the real exports in
../shared/data/nsys, and on broken or crafted databases."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, analyze_json
from tracecomm.cli.app import app
from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest.nsys import load_nsys

NSYS = REPO.parent / "shared" / "data" / "nsys"


@pytest.fixture
def nsys_exports() -> Path:
    if not NSYS.is_dir():
        pytest.skip("../shared/data/nsys is not present")
    return NSYS


def _sql_kernel_ns(export: Path, device: int) -> dict[str, int]:
    """Per class, the time one GPU ran kernels of it, straight from the database: the union of
    the kernels' intervals (a few overlap on one stream: programmatic dependent launch)."""
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT s.value LIKE '%nccl%', k.start, k.end "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
            "WHERE k.deviceId = ? ORDER BY k.start",
            (device,),
        ).fetchall()
    out = {}
    for cls, nccl in (("compute", 0), ("comm", 1)):
        total, reach = 0, None
        for _, start, end in (r for r in rows if r[0] == nccl):
            if reach is None or start > reach:
                total, reach = total + end - start, end
            elif end > reach:
                total, reach = total + end - reach, end
        out[cls] = total
    return out


def test_the_two_gpu_export_is_two_ranks_with_the_databases_kernel_time(
    nsys_exports: Path,
) -> None:
    export = nsys_exports / "mfu_2gpu_before.sqlite"
    doc = analyze_json(export)
    assert doc["summary"]["ranks_analyzed"] == 2
    for rank in doc["ranks"]:
        device = rank["rank"]  # one process per GPU, in GPU order (torchrun --nnodes=1)
        want = _sql_kernel_ns(export, device)
        window = rank["window"]["figures"]
        # one stream per GPU: the union of each class is its sum
        assert (window["compute_ns"], window["comm_ns"]) == (want["compute"], want["comm"])
        assert rank["host"] == "modal"
    by_type = {t["coll_type"]: t["kernels"] for t in doc["by_type"]}
    assert sum(by_type.values()) == 66  # 33 ncclDevKernel_SendRecv per GPU
    # most of them were launched inside PyTorch's nccl:all_to_all ranges (metrics.md §1)
    assert by_type["AllToAll"] > by_type.get("SendRecv", 0)


def test_nccl_kernels_on_the_compute_stream_are_exposed_as_the_partition_says(
    nsys_exports: Path,
) -> None:
    for events in load_nsys(nsys_exports / "mfu_2gpu_before.sqlite"):
        kernels = events.device.filter(events.device["kind"] == "kernel")
        assert kernels["stream"].n_unique() == 1  # NCCL shares the compute stream
    doc = analyze_json(nsys_exports / "mfu_2gpu_before.sqlite")
    for rank in doc["ranks"]:
        f = rank["window"]["figures"]
        assert f["overlapped_comm_ns"] == 0  # one stream: nothing runs beside a collective
        assert f["exposed_comm_ns"] == f["comm_ns"]


def test_an_export_without_nccl_and_one_with_full_metadata(nsys_exports: Path) -> None:
    doc = analyze_json(nsys_exports / "h100_2gpu_1s.sqlite")
    assert doc["summary"]["ranks_analyzed"] == 2 and doc["by_type"] == []
    assert any("ranks by GPU order" in w for w in doc["warnings"])
    mock = analyze_json(nsys_exports / "mock.sqlite")
    assert mock["ranks"][0]["devices"] == ["NVIDIA GeForce RTX 3080"]


def test_compare_an_export_with_its_saved_report(nsys_exports: Path, tmp_path: Path) -> None:
    export = nsys_exports / "mfu_2gpu_before.sqlite"
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(analyze_json(export)))
    result = CliRunner().invoke(app, ["compare", str(saved), str(export), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["runs"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not a database at all", "not an SQLite database"),
        (b"SQLite format 3\x00" + b"\x00" * 200, "unreadable SQLite database"),
    ],
)
def test_a_file_that_is_no_database_is_one_line(tmp_path: Path, content: bytes, why: str) -> None:
    bad = tmp_path / "r.sqlite"
    bad.write_bytes(content)
    with pytest.raises(TraceError, match=why):
        load_nsys(bad)
    result = CliRunner().invoke(app, ["analyze", str(bad)])
    assert result.exit_code == 3
    assert why in result.stderr and "Traceback" not in result.stderr


def test_a_database_that_is_no_export_is_not_a_trace(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE runs (id INTEGER)")
    with pytest.raises(NotATrace):
        load_nsys(other)


def test_a_crafted_export_is_read_within_its_bounds(tmp_path: Path) -> None:
    """Huge names are cut, a kernel with no runtime launch counts as unlinked, nothing runs."""
    crafted = tmp_path / "x.sqlite"
    with sqlite3.connect(crafted) as db:
        db.executescript(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
            "INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName "
            "INTEGER, shortName INTEGER);"
        )
        db.execute("INSERT INTO StringIds VALUES (1, ?)", ("\x1b[31m" + "k" * 100_000,))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 20, 0, 7, 1, 0, 1, 1)")
    (events,) = load_nsys(crafted)
    assert events.device.height == 1 and len(events.device["name"][0]) == 4096
    result = CliRunner().invoke(app, ["analyze", str(crafted)])
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout
