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
from tracecomm.ingest.nccl_nvtx import _blob_fields, _Entry, _json_fields, _Schemas
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


_ENTRIES = [_Entry("comm", 0, "<Q"), _Entry("bytes", 8, "<Q"), _Entry("peer", 16, "<i")]
_SEND = _Schemas({(1, 9): _ENTRIES}, {9: _ENTRIES})


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


# ---- crafted exports: what each NCCL call or group gives the kernels it launched ----------

_PID = 77
_TID = (1 << 48) | (_PID << 24) | _PID  # the main thread's serialized id
_NAMES = ["ncclKernel", "cuLaunchKernelEx", "NCCL"]


def _crafted(
    path: Path,
    calls: list[tuple[str, int, int, dict | None]],
    launches: list[int],
    capture: dict[str, str] | None = None,
) -> list[dict[str, object]]:
    """An export of one process: NCCL calls (name, start, end, payload), a kernel launched at
    each of ``launches`` (correlation = its index); returns each kernel's metadata."""
    import json

    names = _NAMES + sorted({c[0] for c in calls})
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, text TEXT, "
            "globalTid INT, textId INT, domainId INT, jsonTextId INT, jsonText TEXT, "
            "binaryData TEXT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, "
            "correlationId INT, nameId INT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, "
            "streamId INT, correlationId INT, globalPid INT, demangledName INT, shortName INT);"
            "CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);"
        )
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(names)))
        db.execute("INSERT INTO NVTX_EVENTS VALUES (0, NULL, 75, 'NCCL', ?, NULL, 1, NULL, "
                   "NULL, NULL)", (_TID,))  # fmt: skip
        for name, start, end, payload in calls:
            db.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, ?, ?, 1, NULL, ?, NULL)",
                (start, end, _TID, names.index(name), json.dumps(payload) if payload else None),
            )
        for corr, at in enumerate(launches):
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1)",
                       (at, at + 1, _TID, corr))  # fmt: skip
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, 0, 0)",
                       (10_000 + 100 * corr, 10_050 + 100 * corr, corr, _TID - _PID))  # fmt: skip
        for key, value in (capture or {}).items():
            db.execute("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", (key, value))
    (events,) = load_nsys(path)
    meta = events.device.join(events.device_meta, on="dev_row", how="left")
    return (
        meta.sort("start_ns")
        .select("collective_name", "in_msg_nelems", "out_msg_nelems", "group_size", "pg_name")
        .to_dicts()
    )


_WORLD = {"PROCESS_0:PID": str(_PID), "PROCESS_0:ENVIRONMENT_VARIABLE": "WORLD_SIZE=8"}


def _init(comm: int, nranks: int, rank: int, at: int = 0, call: str = "ncclCommInitRank"):
    return (call, at, at + 5, {"NCCL communicator ID": comm, "No. of ranks": nranks,
                               "Rank": rank})  # fmt: skip


def _op(call: str, start: int, size: int, comm: int = 1, peer: int | None = None):
    payload = {"NCCL communicator ID": comm, "Message size [bytes]": size}
    if peer is not None:
        payload["Peer rank"] = peer
    return (call, start, start + 5, payload)


def test_a_group_that_launches_twice_gives_its_sizes_once(tmp_path: Path) -> None:
    calls = [_init(1, 8, 3), ("ncclGroupStart", 100, 101, None), _op("ncclAllGather", 110, 1000),
             _op("ncclAllGather", 120, 1000), ("ncclGroupEnd", 130, 160, None)]  # fmt: skip
    first, second = _crafted(tmp_path / "x.sqlite", calls, [140, 150], _WORLD)
    assert (first["in_msg_nelems"], first["out_msg_nelems"]) == (2000, 16000)
    assert first["collective_name"] == "allgather" and first["group_size"] == 8
    assert second["in_msg_nelems"] is None and second["pg_name"] == first["pg_name"]


def test_a_nested_group_counts_as_its_outermost(tmp_path: Path) -> None:
    calls = [("ncclGroupStart", 100, 101, None), _op("ncclSend", 110, 1000, peer=1),
             ("ncclGroupStart", 120, 121, None), _op("ncclSend", 130, 10, peer=1),
             ("ncclGroupEnd", 140, 141, None), _op("ncclRecv", 150, 100, peer=1),
             ("ncclGroupEnd", 160, 190, None)]  # fmt: skip
    (kernel,) = _crafted(tmp_path / "x.sqlite", calls, [170])
    assert (kernel["in_msg_nelems"], kernel["out_msg_nelems"]) == (1010, 100)
    assert kernel["collective_name"] is None  # sends and recvs: typed by the launch context


def test_a_group_whose_start_was_cut_owns_nothing(tmp_path: Path) -> None:
    calls = [_op("ncclSend", 50, 5, peer=1), ("ncclGroupEnd", 60, 90, None),
             ("ncclGroupStart", 100, 101, None), _op("ncclSend", 110, 7, peer=1),
             ("ncclGroupEnd", 120, 150, None)]  # fmt: skip
    cut, whole = _crafted(tmp_path / "x.sqlite", calls, [70, 130])
    assert cut["in_msg_nelems"] is None and whole["in_msg_nelems"] == 7


def test_split_and_all_to_all_payloads(tmp_path: Path) -> None:
    """ncclCommSplit's payload holds the parent's size: the split's stays unknown; NCCL
    2.28's ncclAlltoAll gives the bytes per peer."""
    calls = [_init(1, 8, 3), _init(2, 8, 3, at=10, call="ncclCommSplit"),
             _op("ncclAllGather", 100, 1000, comm=2), _op("ncclAlltoAll", 200, 100)]  # fmt: skip
    gather, a2a = _crafted(tmp_path / "x.sqlite", calls, [102, 202], _WORLD)
    assert gather["in_msg_nelems"] == 1000 and gather["out_msg_nelems"] is None
    assert gather["group_size"] is None
    assert a2a["collective_name"] == "all_to_all"
    assert (a2a["in_msg_nelems"], a2a["out_msg_nelems"]) == (800, 800)


def test_the_global_rank_needs_the_world_size(tmp_path: Path) -> None:
    """A file's largest communicator may be a subgroup's: its rank is the global rank only when
    the world size says it spans the world."""
    calls = [_init(1, 4, 2), _op("ncclAllReduce", 100, 64)]
    _crafted(tmp_path / "a.sqlite", calls, [102])
    (alone,) = load_nsys(tmp_path / "a.sqlite")
    assert alone.meta.rank is None
    world4 = {"PROCESS_0:PID": str(_PID), "PROCESS_0:ENVIRONMENT_VARIABLE": "WORLD_SIZE=4"}
    _crafted(tmp_path / "b.sqlite", calls, [102], world4)
    (known,) = load_nsys(tmp_path / "b.sqlite")
    assert known.meta.rank == 2


def test_crafted_values_are_left_out_not_raised(tmp_path: Path) -> None:
    """Past Int64, booleans, text in a time: null or dropped, never an exception."""
    huge = (1 << 64) - 1
    calls = [("ncclAllReduce", 100, 105, {"NCCL communicator ID": huge,
                                           "Message size [bytes]": huge, "No. of ranks": huge}),
             _op("ncclAllReduce", 200, 64)]  # fmt: skip
    path = tmp_path / "x.sqlite"
    first, second = _crafted(path, calls, [102, 202])
    assert first["in_msg_nelems"] is None and first["pg_name"] == "comm 0xffffffffffffffff"
    assert second["in_msg_nelems"] == 64
    with sqlite3.connect(path) as db:
        db.execute("UPDATE NVTX_EVENTS SET start = 'soon' WHERE start = 200")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = x'00' WHERE correlationId = 0")
    (events,) = load_nsys(path)
    assert events.device.height == 1  # the kernel with a blob for its end is dropped


def test_one_registered_payload_named_by_many_rows(tmp_path: Path) -> None:
    """jsonTextId: the string is fetched and decoded once, whatever the number of rows."""
    path = tmp_path / "x.sqlite"
    calls = [_op("ncclAllReduce", 100 + 10 * i, 0) for i in range(200)]
    _crafted(path, calls, [102 + 10 * i for i in range(200)])
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO StringIds VALUES (99, ?)",
                   ('{"Message size [bytes]": 4096, "pad": "' + "x" * 60_000 + '"}',))  # fmt: skip
        db.execute("UPDATE NVTX_EVENTS SET jsonText = NULL, jsonTextId = 99 WHERE eventType = 59")
    (events,) = load_nsys(path)
    sizes = events.device_meta["in_msg_nelems"]
    assert sizes.len() == 200 and set(sizes) == {4096}
