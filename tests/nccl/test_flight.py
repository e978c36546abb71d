"""Flight Recorder dumps: restricted unpickling, schema versions, the divergence point."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from tracecomm.nccl.flight import FlightRecorderError, divergences, load_dump


def entry(seq: int, state: str = "completed", record: int | None = None) -> dict[str, Any]:
    return {
        "record_id": record if record is not None else seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1_764_400_000_000_000_000 + seq,
        "input_sizes": [[1024]],
        "output_sizes": [[1024]],
        "state": state,
        "is_p2p": False,
        "timeout_ms": 600000,
    }


def dump(entries: list[dict[str, Any]], version: str = "2.10") -> dict[str, Any]:
    return {
        "version": version,
        "comm_lib_version": "2.24.3",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "pg_status": {"0": {"last_enqueued_collective": 12, "last_completed_collective": 11}},
        "entries": entries,
    }


def write(folder: Path, rank: int, doc: dict[str, Any], as_json: bool = False) -> Path:
    path = folder / (f"nccl_trace_rank_{rank}.json" if as_json else f"nccl_trace_rank_{rank}")
    path.write_bytes(json.dumps(doc).encode() if as_json else pickle.dumps(doc))
    return path


def test_the_divergence_point(tmp_path: Path) -> None:
    paths = [
        # rank 0's buffer wrapped: it no longer holds seq 8-9
        write(tmp_path, 0, dump([entry(s) for s in range(10, 12)] + [entry(12, "started")])),
        write(tmp_path, 1, dump([entry(s) for s in range(8, 12)] + [entry(12, "started")])),
        write(tmp_path, 2, dump([entry(s) for s in range(8, 12)] + [entry(12, "scheduled")]), True),
        write(tmp_path, 3, dump([entry(s) for s in range(8, 12)])),  # never reached seq 12
    ]
    dumps = [load_dump(p) for p in paths]
    assert [d.rank for d in dumps] == [0, 1, 2, 3] and dumps[0].version == (2, 10)
    (d,) = divergences(dumps)
    assert (d.pg, d.seq, d.op) == ("0", 12, "nccl:all_reduce")
    assert d.missing_ranks == (3,) and d.stuck_ranks == (0, 1, 2)
    assert not d.sizes_disagree


def test_sizes_that_disagree(tmp_path: Path) -> None:
    odd = entry(5, "started") | {"input_sizes": [[2048]]}
    dumps = [
        load_dump(write(tmp_path, 0, dump([entry(5, "started")]))),
        load_dump(write(tmp_path, 1, dump([odd]))),
    ]
    (d,) = divergences(dumps)
    # members without a dump cannot be judged: only ranks 0 and 1 are compared
    assert d.sizes_disagree and d.missing_ranks == () and d.stuck_ranks == (0, 1)


class _Exploit:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("touch /tmp/tracecomm-pwned",))


def test_a_malicious_pickle_is_refused(tmp_path: Path) -> None:
    target = Path("/tmp/tracecomm-pwned")
    target.unlink(missing_ok=True)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump([entry(1)]) | {"entries": [_Exploit()]}))
    with pytest.raises(FlightRecorderError, match=r"refused to load (posix|os)\.system"):
        load_dump(path)
    assert not target.exists()
    # a class instance is refused too, even a harmless one
    path.write_bytes(pickle.dumps(dump([entry(1)]) | {"extra": Path("/")}))
    with pytest.raises(FlightRecorderError, match="refused to load pathlib"):
        load_dump(path)


def test_versions_compare_as_integers(tmp_path: Path) -> None:
    assert load_dump(write(tmp_path, 0, dump([], "2.9"))).version == (2, 9)
    assert load_dump(write(tmp_path, 0, dump([], "2.10"))).version > (2, 9)
    with pytest.raises(FlightRecorderError, match=r"schema 1\.5 is not read"):
        load_dump(write(tmp_path, 0, dump([], "1.5")))
    with pytest.raises(FlightRecorderError, match="no readable schema version"):
        load_dump(write(tmp_path, 0, dump([], "two")))


def test_not_a_dump(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"\x80\x04garbage")
    with pytest.raises(FlightRecorderError, match="not a Flight Recorder dump"):
        load_dump(path)
    path.write_bytes(pickle.dumps({"version": "2.10"}))
    with pytest.raises(FlightRecorderError, match="no entries"):
        load_dump(path)
