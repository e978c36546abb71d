"""The Nsight Systems SQLite writer, read back with sqlite3 alone."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from synth_helpers import load, to_ns

from tracecomm.synth import fsdp_run, moe_run
from tracecomm.synth.__main__ import main
from tracecomm.synth.graphs import graph_replay_run
from tracecomm.synth.nsys import write_nsys_run
from tracecomm.synth.nsys_schema import TABLES
from tracecomm.synth.schedule import RankSpec, RunSpec
from tracecomm.synth.writer import write_run

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "nsys"
REAL_FILES = ("mfu_2gpu_before.sqlite", "mock.sqlite")
KERNEL_KINDS = ("compute", "comm")


@contextmanager
def _db(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        yield db


@pytest.fixture(scope="module")
def run() -> RunSpec:
    # two hosts of 8 ranks, compute, collectives, copies, sets and syncs
    return fsdp_run(world_size=16, steps=2, layers=1)


@pytest.fixture(scope="module")
def per_rank(run: RunSpec, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_nsys_run(run, tmp_path_factory.mktemp("nsys"))


@pytest.fixture(scope="module")
def per_node(run: RunSpec, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_nsys_run(run, tmp_path_factory.mktemp("nsys_node"), per_node=True)


def _session(db: sqlite3.Connection) -> int:
    (start,) = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(start)


def _pids(db: sqlite3.Connection) -> dict[int, int]:
    """pid -> globalPid of the rank processes (python3)."""
    rows = db.execute("SELECT pid, globalPid FROM PROCESSES WHERE name = 'python3'").fetchall()
    return dict(rows)


def _ranks_by_pid(db: sqlite3.Connection) -> dict[int, int]:
    """pid -> RANK, from each process's META_DATA_CAPTURE entries."""
    pid: dict[str, int] = {}
    rank: dict[str, int] = {}
    for name, value in db.execute("SELECT name, value FROM META_DATA_CAPTURE"):
        head, _, what = name.partition(":")
        if what == "PID":
            pid[head] = int(value)
        elif what == "ENVIRONMENT_VARIABLE" and value.startswith("RANK="):
            rank[head] = int(value.removeprefix("RANK=").strip('"'))
    return {pid[k]: r for k, r in rank.items()}


def _rank_of(run: RunSpec, rank: int) -> RankSpec:
    return next(r for r in run.ranks if r.rank == rank)


def test_file_names(run: RunSpec, per_rank: list[Path], per_node: list[Path]) -> None:
    assert [p.name for p in per_rank] == [f"rank{r}.sqlite" for r in range(16)]
    assert [p.name for p in per_node] == ["node0.sqlite", "node1.sqlite"]


def test_version_and_tables(per_rank: list[Path]) -> None:
    with _db(per_rank[0]) as db:
        meta = dict(db.execute("SELECT name, value FROM META_DATA_EXPORT"))
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert meta["EXPORT_SCHEMA_VERSION"] == "3.25.0"
    assert meta["EXPORT_PRODUCT_VERSION"].startswith("2026.2")
    for name in (
        "StringIds",
        "PROCESSES",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "NVTX_EVENTS",
        "TARGET_INFO_SYSTEM_ENV",
        "TARGET_INFO_SESSION_START_TIME",
        "TARGET_INFO_GPU",
        "TARGET_INFO_CUDA_DEVICE",
        "META_DATA_CAPTURE",
    ):
        assert name in tables, name


@pytest.mark.skipif(not REAL.is_dir(), reason="no real Nsight Systems exports here")
@pytest.mark.parametrize("payloads", ["json", "blobs"])
def test_columns_match_a_real_export(
    run: RunSpec, per_rank: list[Path], tmp_path: Path, payloads: str
) -> None:
    export = (
        per_rank[0] if payloads == "json" else write_nsys_run(run, tmp_path, payloads=payloads)[0]
    )
    with _db(export) as mine:
        written = [r[0] for r in mine.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in written:
            ours = mine.execute(f"PRAGMA table_info({table})").fetchall()
            for real_name in REAL_FILES:
                with _db(REAL / real_name) as real:
                    theirs = real.execute(f"PRAGMA table_info({table})").fetchall()
                    if theirs:
                        assert ours == theirs, table
                        break
            else:
                pytest.fail(f"{table} is in no real export")
    # the payload schemas are exported with the blobs only
    blob_tables = {"NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES"}
    assert (blob_tables <= set(written)) == (payloads == "blobs")
    assert set(TABLES) <= set(written) | {"CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"} | blob_tables


def test_identity_encoding(per_rank: list[Path]) -> None:
    with _db(per_rank[3]) as db:
        pids = _pids(db)
        tids = [r[0] for r in db.execute("SELECT DISTINCT globalTid FROM NVTX_EVENTS")]
        tids += [
            r[0] for r in db.execute("SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        ]
    ((pid, gpid),) = pids.items()
    assert gpid == (1 << 48) + pid * 0x1000000
    assert gpid // 0x1000000 % 0x1000000 == pid
    for tid in tids:
        assert tid // 0x1000000 % 0x1000000 == pid
        assert tid - gpid < 0x1000000
    assert gpid + pid in tids  # the main thread: tid == pid


def test_kernels_match_the_spec(run: RunSpec, per_rank: list[Path]) -> None:
    for path in per_rank:
        rank = _rank_of(run, int(path.stem.removeprefix("rank")))
        recorded = [op for op in rank.all_ops() if op.recorded]
        with _db(path) as db:
            for table, kinds in (
                ("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_KINDS),
                ("CUPTI_ACTIVITY_KIND_MEMCPY", ("memcpy",)),
                ("CUPTI_ACTIVITY_KIND_MEMSET", ("memset",)),
            ):
                ops = [op for op in recorded if op.kind in kinds]
                count, total = db.execute(
                    f"SELECT count(*), sum(end - start) FROM {table}"
                ).fetchone()
                assert count == len(ops), (path.name, table)
                assert (total or 0) == sum(op.dur_ns for op in ops), (path.name, table)
            devices = {
                r[0] for r in db.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")
            }
            streams = Counter(
                r[0] for r in db.execute("SELECT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL")
            )
            session = _session(db)
            starts = sorted(
                session + r[0] for r in db.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL")
            )
        assert devices == {rank.rank % 8}
        assert streams == Counter(op.stream for op in recorded if op.kind in KERNEL_KINDS)
        assert starts == sorted(op.start_ns for op in recorded if op.kind in KERNEL_KINDS)


def test_correlation_joins_kernels_to_launches(run: RunSpec, per_rank: list[Path]) -> None:
    rank = _rank_of(run, 5)
    launched = [op for op in rank.all_ops() if op.recorded and op.launched]
    with _db(per_rank[5]) as db:
        joined = db.execute(
            "SELECT k.start, r.start, s.value, r.eventClass FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "AND r.globalTid / 0x1000000 = k.globalPid / 0x1000000 "
            "JOIN StringIds s ON s.id = r.nameId"
        ).fetchall()
        session = _session(db)
    kernels = [op for op in launched if op.kind in KERNEL_KINDS]
    assert len(joined) == len(kernels)
    got = sorted((session + k, session + r) for k, r, _, _ in joined)
    assert got == sorted((op.start_ns, op.launch_ns) for op in kernels)
    names = Counter((name, cls) for _, _, name, cls in joined)
    comm = sum(1 for op in kernels if op.kind == "comm")
    assert names[("cuLaunchKernelEx", 1)] == comm
    assert names[("cudaLaunchKernel_v7000", 0)] == len(kernels) - comm


def test_steps_are_nvtx_ranges(run: RunSpec, per_rank: list[Path]) -> None:
    rank = _rank_of(run, 9)
    with _db(per_rank[9]) as db:
        session = _session(db)
        rows = db.execute(
            "SELECT text, start, end, eventType, domainId, globalTid FROM NVTX_EVENTS "
            "WHERE text LIKE 'ProfilerStep#%'"
        ).fetchall()
        (gpid,) = _pids(db).values()
    steps = {text.split(",")[0]: (session + s, session + e) for text, s, e, *_ in rows}
    assert steps == {f"ProfilerStep#{s.number}": (s.cpu_start_ns, s.cpu_end_ns) for s in rank.steps}
    assert all(text.split(", op_id = ")[1].isdigit() for text, *_ in rows)
    assert {(t, d) for *_, t, d, _ in rows} == {(59, 0)}
    assert {tid - gpid for *_, tid in rows} == {gpid // 0x1000000 % 0x1000000}


def test_collective_ranges(run: RunSpec, per_rank: list[Path]) -> None:
    rank = _rank_of(run, 0)
    comms = [op for op in rank.all_ops() if op.kind == "comm" and op.launched]
    with _db(per_rank[0]) as db:
        domain = db.execute(
            "SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75"
        ).fetchall()
        nccl = Counter(
            r[0]
            for r in db.execute(
                "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                "WHERE n.domainId = ? AND n.text IS NULL AND n.eventType = 59",
                (domain[0][0],),
            )
        )
        torch = Counter(
            r[0].split(",")[0]
            for r in db.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'nccl:%'")
        )
        sizes = dict(
            db.execute(
                "SELECT s.value, sum(json_extract(n.jsonText, '$.\"Message size [bytes]\"')) "
                "FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE n.domainId = ? "
                "GROUP BY s.value",
                (domain[0][0],),
            ).fetchall()
        )
    assert [d[1] for d in domain] == ["NCCL"]
    calls = {"AllGather": "ncclAllGather", "ReduceScatter": "ncclReduceScatter"}
    calls["AllReduce"] = "ncclAllReduce"
    # one init per communicator the rank used (the world's, for FSDP), then the calls
    assert nccl.pop("ncclCommInitRank") == 1
    assert nccl == Counter(calls[op.coll or ""] for op in comms)
    # NCCL's sizes: an AllGather's send count, a ReduceScatter's receive count, in bytes
    world = len(run.ranks)
    width = {"AllGather": 2, "ReduceScatter": 2, "AllReduce": 4}
    for coll, call in calls.items():
        ops = [op for op in comms if op.coll == coll]
        per = [op.nelems // world if coll == "ReduceScatter" else op.nelems for op in ops]
        assert sizes[call] == sum(per) * width[coll], coll
    assert sum(torch.values()) == len(comms)
    assert torch["nccl:all_reduce"] == sum(op.coll == "AllReduce" for op in comms)


def test_all_to_all_is_a_group_of_sends(tmp_path: Path) -> None:
    spec = moe_run(ranks=4, steps=1, metadata=True)
    path = write_nsys_run(spec, tmp_path)[1]
    a2a = [op for op in _rank_of(spec, 1).all_ops() if op.coll == "AllToAll" and op.launched]
    with _db(path) as db:
        nccl = Counter(
            r[0]
            for r in db.execute(
                "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId"
            )
        )
        texts = [
            r[0]
            for r in db.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE 'nccl:all_to_all%'")
        ]
    assert a2a and len(texts) == len(a2a)
    assert nccl["ncclGroupStart"] == nccl["ncclGroupEnd"] == len(a2a)
    assert nccl["ncclSend"] == nccl["ncclRecv"] == 4 * len(a2a)


def test_same_events_as_the_kineto_file(run: RunSpec, tmp_path: Path) -> None:
    """Runtime calls and CPU ops: the same correlation ids and absolute times in both files."""
    small = RunSpec(run.world_size, (_rank_of(run, 2),), gzip=False, groups=run.groups)
    (kineto,) = write_run(small, tmp_path / "k")
    (export,) = write_nsys_run(small, tmp_path / "n")
    doc = load(kineto)
    runtime = {
        e["args"]["correlation"]: to_ns(doc, e["ts"])
        for e in doc["traceEvents"]
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    cpu_ops = {
        (e["name"], e["args"]["Record function id"]): (
            to_ns(doc, e["ts"]),
            to_ns(doc, e["ts"]) + to_ns({}, e["dur"]),
        )
        for e in doc["traceEvents"]
        if e.get("cat") in ("cpu_op", "user_annotation") and "Record function id" in e["args"]
    }
    with _db(export) as db:
        session = _session(db)
        rt = dict(db.execute("SELECT correlationId, start FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
        ranges = {}
        for text, start, end in db.execute(
            "SELECT text, start, end FROM NVTX_EVENTS WHERE text LIKE '%, op_id = %'"
        ):
            name, _, op_id = text.rpartition(", op_id = ")
            ranges[(name, int(op_id))] = (session + start, session + end)
    assert {c: session + t for c, t in rt.items() if c in runtime} == runtime
    assert {k: v for k, v in ranges.items() if k in cpu_ops} == cpu_ops
    assert len(cpu_ops) > 10 and set(cpu_ops) <= set(ranges)


def test_per_node_files_hold_the_node(run: RunSpec, per_node: list[Path]) -> None:
    seen: set[int] = set()
    for index, path in enumerate(per_node):
        want = sorted(r.rank for r in run.ranks if r.host == path.stem)
        with _db(path) as db:
            pids = _pids(db)
            ranks = _ranks_by_pid(db)
            kernel_pids = {
                r[0]
                for r in db.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")
            }
            devices = set(
                db.execute("SELECT DISTINCT globalPid, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")
            )
            env = dict(db.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"))
            command = dict(db.execute("SELECT name, value FROM META_DATA_CAPTURE"))
            count = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        assert len(pids) == len(set(pids.values())) == len(want) == 8
        assert sorted(ranks.values()) == want and set(ranks) == set(pids)
        assert kernel_pids == set(pids.values())
        assert devices == {(pids[pid], rank % 8) for pid, rank in ranks.items()}
        assert env["Hostname"] == path.stem
        assert command["PROCESS_0:COMMAND"] == "torchrun"
        assert f"--node_rank={index}" in command.values()
        assert count == sum(
            1
            for r in run.ranks
            if r.host == path.stem
            for op in r.all_ops()
            if op.recorded and op.kind in KERNEL_KINDS
        )
        assert not seen & set(pids.values())
        seen |= set(pids.values())


def test_rank_environment(per_rank: list[Path]) -> None:
    for path in per_rank[:3]:
        with _db(path) as db:
            ranks = _ranks_by_pid(db)
            pids = _pids(db)
            gpus = db.execute("SELECT cudaId, pid FROM TARGET_INFO_CUDA_DEVICE").fetchall()
            names = db.execute("SELECT name FROM TARGET_INFO_GPU").fetchall()
        assert list(ranks.values()) == [int(path.stem.removeprefix("rank"))]
        assert set(ranks) == set(pids)
        assert gpus == [(ranks[gpus[0][1]] % 8, gpus[0][1])]
        assert names == [("NVIDIA H100 80GB HBM3",)]


def test_rows_are_shuffled_and_deterministic(run: RunSpec, tmp_path: Path) -> None:
    small = RunSpec(run.world_size, (_rank_of(run, 0),), gzip=False, groups=run.groups)
    a = write_nsys_run(small, tmp_path / "a")[0]
    b = write_nsys_run(small, tmp_path / "b")[0]
    c = write_nsys_run(small, tmp_path / "c", seed=1)[0]
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    with _db(a) as db_a, _db(c) as db_c:
        starts = [r[0] for r in db_a.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL")]
        other = [r[0] for r in db_c.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    assert starts != sorted(starts) and sorted(starts) == sorted(other) and starts != other


def test_graph_replays(tmp_path: Path) -> None:
    spec = graph_replay_run(steps=2)
    (path,) = write_nsys_run(spec, tmp_path)
    ops = [op for op in spec.ranks[0].all_ops() if op.recorded and op.kind in KERNEL_KINDS]
    with _db(path) as db:
        rows = db.execute(
            "SELECT count(*), count(graphId) FROM CUPTI_ACTIVITY_KIND_KERNEL"
        ).fetchone()
        launches = db.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
            "ON s.id = r.nameId WHERE s.value = 'cudaGraphLaunch_v10000'"
        ).fetchone()[0]
        session = _session(db)
    assert rows == (len(ops), sum(1 for op in ops if op.graph))
    assert launches == len({(op.graph, op.launch_ns) for op in ops if op.graph})
    assert session >= 0


def test_cli_writes_exports(tmp_path: Path) -> None:
    args = ["--ranks", "16", "--steps", "1", "--layers", "1", "--format", "nsys"]
    assert main([str(tmp_path / "r"), *args]) == 0
    assert len(list((tmp_path / "r").glob("rank*.sqlite"))) == 16
    assert main([str(tmp_path / "n"), *args, "--nsys-per-node"]) == 0
    assert sorted(p.name for p in (tmp_path / "n").iterdir()) == ["node0.sqlite", "node1.sqlite"]
    for layout in (["--layout", "dp-pp"], ["--layout", "moe", "--ranks", "4"]):
        out = tmp_path / layout[1]
        assert main([str(out), "--steps", "1", "--format", "nsys", *layout]) == 0
        assert any(out.glob("*.sqlite"))
    assert main([str(tmp_path / "x"), "--nsys-per-node"]) == 2
