"""Nsight Systems SQLite exports (ingest.nsys, metrics.md §1b) on the real exports in
../shared/data/nsys, and on broken or crafted databases."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, analyze_json
from tracecomm.cli.app import app
from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest import nsys
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


def _same_events(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for field in dataclasses.fields(x):
            left, right = getattr(x, field.name), getattr(y, field.name)
            if isinstance(left, pl.DataFrame):
                assert left.equals(right), field.name  # rows in the same order too
            else:
                assert left == right, field.name


def _odd_export(path: Path) -> Path:
    """An export whose columns hold what SQLite lets them: text and reals in times and ids,
    a blob, names with quotes, control characters, a NUL and non-ASCII text."""
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, "
            "correlationId, globalPid, demangledName, shortName);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, "
            "nameId);"
            "CREATE TABLE NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId);"
        )
        names = ['k"1\\', "k\n2\t\x00x", "√ké 🙂", "cudaLaunchKernel_v7000"]
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", enumerate(names, 1))
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, 0, ?, ?)",
            [
                (10, 20, 7, 1, 1, 1),
                (30, 40, 7.5, 2, 2, 2),
                ("50", 60, 7, 3, 3, 3),
                (70, 80, b"\x07", 4, 1, 1),
                (90, 100.25, 7, 5, 9, 9),
            ],
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 5, ?, 4)",
            [(5, 9, 1), (25, 29, 2), (45, 49, "x")],
        )
        db.executemany(
            "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, 5, 0)",
            [(1, 200, "step 1", None), (2, 30, "aten::mm, op_id = 4", None), (3, 9, None, 3)],
        )
    return path


def test_columns_read_whole_match_the_rows_read_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Columns come from SQLite as JSON arrays; where a value is not of its column's type the
    rows are read one by one, as before: either way the same events, in the same order."""
    exports = [*sorted(NSYS.glob("*.sqlite")), _odd_export(tmp_path / "odd.sqlite")]
    whole = [load_nsys(e) for e in exports]
    monkeypatch.setattr(nsys, "_json_frame", lambda *_: None)
    for export, events in zip(exports, whole, strict=True):
        _same_events(events, load_nsys(export))


def test_text_that_is_not_utf8_is_the_same_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = _odd_export(tmp_path / "bad.sqlite")
    with sqlite3.connect(bad) as db:
        db.execute("UPDATE StringIds SET value = CAST(x'ff41' AS TEXT) WHERE id = 1")
    with pytest.raises(TraceError, match="unreadable SQLite database") as whole:
        load_nsys(bad)
    monkeypatch.setattr(nsys, "_json_frame", lambda *_: None)
    with pytest.raises(TraceError) as by_rows:
        load_nsys(bad)
    assert str(whole.value) == str(by_rows.value)


# What an export cannot say: a process group's name (NCCL names a communicator by its id), and
# so its Seq (instances are matched, and keyed, by order within the communicator).
_ONLY_IN_KINETO = ("keyed_by", "group", "key")


def _differences(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key in ("inputs", "path") or key in _ONLY_IN_KINETO:
                continue
            out += _differences(a.get(key), b.get(key), f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r:.80} | {b!r:.80}"]


def _group_names(kineto: dict, nsys: dict) -> dict[str, str]:
    """Kineto's process group -> the communicator the export names in its place, from the
    straggler rows (the same rows in the same order)."""
    pairs = {
        (k["group"], n["group"])
        for k, n in zip(
            kineto["stragglers"]["by_group_type"], nsys["stragglers"]["by_group_type"], strict=True
        )
    }
    return dict(pairs)


def _two_formats(tmp_path: Path, layout: str, per_node: bool = False, payloads: str = "json"):
    from tracecomm.synth.__main__ import _parser, _spec
    from tracecomm.synth.nsys import write_nsys_run
    from tracecomm.synth.writer import write_run

    spec = _spec(_parser().parse_args([str(tmp_path / "k"), *layout.split()]))
    write_run(spec, tmp_path / "k")
    write_nsys_run(spec, tmp_path / "n", per_node=per_node, payloads=payloads)
    return spec, analyze_json(tmp_path / "k"), analyze_json(tmp_path / "n")


@pytest.mark.parametrize(
    ("layout", "per_node", "payloads"),
    [
        ("--ranks 4 --steps 3", False, "json"),
        ("--ranks 4 --steps 3", True, "blobs"),
        ("--layout dp-tp --ranks 8 --steps 2", True, "json"),
        ("--layout dp-pp --dp 2 --pp 2 --microbatches 4 --steps 2", False, "blobs"),
        ("--layout moe --ranks 4 --layers 2 --ep-comm deepep --overlap", False, "json"),
    ],
)
def test_a_generated_run_reads_the_same_from_kineto_and_nsys(
    tmp_path: Path, layout: str, per_node: bool, payloads: str
) -> None:
    """Every figure agrees, bandwidth and send / recv pairing included (NCCL's payloads: sizes,
    communicators, peers); a process group is named by its communicator's id, one for one."""
    spec, kineto, nsys = _two_formats(tmp_path, layout, per_node, payloads)
    assert _differences(kineto, nsys) == []
    assert nsys["summary"]["ranks_analyzed"] == len(spec.ranks)
    names = _group_names(kineto, nsys)
    assert len(set(names.values())) == len(names)  # one communicator per process group
    # DeepEP's kernels make no NCCL call: their group is the world in both
    assert all(n.startswith("comm 0x") or n == k for k, n in names.items())


def test_an_export_without_payload_values_loses_sizes_and_pairs_only(tmp_path: Path) -> None:
    """Exported without --include-json: every per-rank figure; no bandwidth (no message
    sizes), a warning that says why."""
    _, kineto, nsys = _two_formats(tmp_path, "--ranks 4 --steps 3", payloads="none")
    for key in ("ranks", "by_type"):
        assert _differences(kineto[key], nsys[key]) == []
    assert nsys["bandwidth"]["measured"] == 0 < kineto["bandwidth"]["measured"]
    assert any("without their payload values" in w for w in nsys["warnings"])


def test_all_to_all_volumes_from_payloads_are_bytes_with_the_same_imbalance(
    tmp_path: Path,
) -> None:
    """NCCL's payloads give bytes per peer, not split sizes: the volume is in elements of one
    byte, the imbalance ratio the tokens' (metrics.md §1b)."""
    layout = "--layout moe --ranks 4 --layers 2 --metadata --imbalance 3"
    _, kineto, nsys = _two_formats(tmp_path, layout)
    k, n = kineto["all_to_all"]["imbalance"], nsys["all_to_all"]["imbalance"]
    assert (k["unit"], n["unit"]) == ("tokens", "elements")
    assert k["busiest_rank"] == n["busiest_rank"]
    ratio = k["busiest_received"] / k["median_received"]
    assert n["busiest_received"] / n["median_received"] == pytest.approx(ratio)
    row_bytes = n["median_received"] / k["median_received"]  # one token's bytes
    assert row_bytes == int(row_bytes) > 1


def test_an_older_schema_without_runtime_or_nvtx_is_analyzed_with_notes(tmp_path: Path) -> None:
    """Schema 2.x (EXPORT_META_DATA), kernels without globalPid, no launches, no NVTX: compute
    and idle from the kernels, one window, the notes saying what is missing."""
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as db:
        db.executescript(
            "CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);"
            "INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_SCHEMA_VERSION', '2.7.1');"
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO StringIds VALUES (1, 'sm90_gemm'), "
            "(2, 'ncclKernel_AllReduce_RING_LL_Sum_float');"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, "
            "deviceId INT NOT NULL, contextId INT NOT NULL, streamId INT NOT NULL, "
            "correlationId INT NOT NULL, demangledName INT NOT NULL, shortName INT NOT NULL);"
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (2000, 5000, 0, 1, 7, 2, 1, 1), "
            "(1000, 1500, 0, 1, 7, 1, 1, 1), (4000, 6000, 0, 1, 20, 3, 2, 2);"
        )
    doc = analyze_json(old)
    (rank,) = doc["ranks"]
    f = rank["window"]["figures"]
    assert (f["window_ns"], f["compute_ns"], f["comm_ns"], f["exposed_comm_ns"]) == (
        5000,
        3500,
        2000,
        1000,
    )
    assert f["idle_ns"] == 500
    notes = " ".join(n["text"] for n in doc["notes"])
    assert "no matching runtime launch" in notes and "no ProfilerStep" in notes


def test_a_report_needs_nsys_to_be_exported_first(tmp_path: Path, monkeypatch) -> None:
    report = tmp_path / "job.nsys-rep"
    report.write_bytes(b"\x00" * 64)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = CliRunner().invoke(app, ["analyze", str(report)])
    assert result.exit_code == 3
    line = "nsys export --type sqlite --include-json true -o job.sqlite job.nsys-rep"
    assert line in result.stderr and "Traceback" not in result.stderr


def test_a_report_is_exported_with_nsys_beside_nothing(
    tmp_path: Path, monkeypatch, nsys_exports: Path
) -> None:
    """With nsys on PATH a report is exported into a temporary folder, never beside it."""
    bin_dir, run = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    run.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(
        "#!/bin/sh\n# nsys export --type sqlite --include-json true -o OUT FILE\n"
        f'cp "{nsys_exports / "mock.sqlite"}" "$7"\n'
    )
    fake.chmod(0o755)
    (run / "job.nsys-rep").write_bytes(b"\x00" * 64)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    doc = analyze_json(run)
    assert doc["summary"]["ranks_analyzed"] == 1
    assert doc["ranks"][0]["path"].startswith(str(run / "job.nsys-rep"))
    assert sorted(p.name for p in run.iterdir()) == ["job.nsys-rep"]
