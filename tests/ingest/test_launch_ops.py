"""What the readers keep for the kernel and launch views: each launch's CPU op (by the
External id it carries, kineto-traces.md §7) and the CUDA graph ids of replayed kernels, alike
on every reader (general, C scanner, streamed in chunks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import kernel, launch, step, trace_doc, write_trace
from tracecomm.ingest import fast, load_rank, stream
from tracecomm.ingest.model import RankEvents, ReadOptions


def cpu_op(name: str, ts: int, dur: int, ext: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {"External id": ext},
    }


def with_ext(event: dict[str, Any], ext: int) -> dict[str, Any]:
    event["args"]["External id"] = ext
    return event


def events() -> list[dict[str, Any]]:
    return [
        step(1, 990, 500),
        cpu_op("aten::mm", 994, 10, 11),
        cpu_op("aten::add_", 1004, 10, 12),
        cpu_op("aten::unused", 1100, 10, 13),
        with_ext(launch(995, 1), 11),
        with_ext(launch(1005, 2), 12),
        with_ext(launch(1006, 7), 7),  # older Kineto: the launch's own correlation
        launch(1010, 3),  # no External id
        with_ext(launch(1020, 4, "cudaGraphLaunch"), 99),  # names no op in the trace
        kernel("gemm", 1000, 10, 1),
        kernel("add", 1011, 5, 2),
        kernel("x", 1017, 1, 7),
        kernel("y", 1019, 1, 3),
        kernel("node_a", 1030, 4, 4, **{"graph id": 5, "graph node id": 21474836481}),
        kernel("node_b", 1035, 4, 4, **{"graph id": 5, "graph node id": 2}),
        kernel("plain", 1040, 4, 3, **{"graph id": 0, "graph node id": 0}),
    ]


def readers(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[RankEvents]:
    read = ReadOptions()
    out = [load_rank(path, read)]
    with monkeypatch.context() as m:
        m.setattr(fast, "_scan", None)
        out.append(load_rank(path, read))
    with monkeypatch.context() as m:
        m.setattr(stream, "STREAM_FROM_BYTES", 0)
        m.setattr(stream, "CHUNK_BYTES", 256)
        out.append(load_rank(path, read))
    return out


def test_each_launch_names_its_op_on_every_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace(tmp_path / "t.json", trace_doc(events(), deviceProperties=[{"id": 0}]))
    for rank in readers(path, monkeypatch):
        ops = dict(rank.launches.select("correlation", "op").iter_rows())
        assert ops == {1: "aten::mm", 2: "aten::add_", 7: None, 3: None, 4: None}, rank.path


def test_graph_ids_of_replayed_kernels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_trace(tmp_path / "t.json", trace_doc(events(), deviceProperties=[{"id": 0}]))
    for rank in readers(path, monkeypatch):
        rows = rank.device.select("name", "graph_id", "graph_node").iter_rows()
        got = {n: (g, node) for n, g, node in rows}
        assert got["node_a"] == (5, 21474836481)
        assert got["node_b"] == (5, 2)
        assert got["plain"] == (None, None)  # 0: not from a graph
        assert got["gemm"] == (None, None)
