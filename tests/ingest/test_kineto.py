import json
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import kernel, launch, simple_events, step, trace_doc, write_trace
from tracecomm.errors import NotATrace, TraceError
from tracecomm.ingest import load_rank
from tracecomm.ingest.model import ReadOptions
from tracecomm.mfu.opflops import SHAPED_OPS


def test_parses_compact_json_and_keeps_exact_ns(tmp_path: Path) -> None:
    events = [kernel("k", "5077185321273.005", "1.999", 1), launch("5077185321270.001", 1)]
    doc = trace_doc(events, rank=3, world=8, baseTimeNanoseconds=1711958400000000000)
    path = tmp_path / "x.json"
    path.write_text(
        json.dumps(doc, separators=(",", ":"))
        .replace('"5077185321273.005"', "5077185321273.005")
        .replace('"1.999"', "1.999")
        .replace('"5077185321270.001"', "5077185321270.001")
    )
    rank = load_rank(path)
    assert rank.meta.rank == 3 and rank.meta.world_size == 8
    assert rank.meta.base_time_ns == 1711958400000000000
    base = 1711958400000000000  # added, so every rank is on the epoch clock
    row = rank.device.row(0, named=True)
    assert (row["start_ns"], row["end_ns"]) == (base + 5077185321273005, base + 5077185321275004)
    assert rank.launches["start_ns"].to_list() == [base + 5077185321270001]
    assert rank.epoch_clock


def test_old_capitalisation_and_lowercase_external_id(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
            "pid": 0,
            "tid": "stream 16",
            "ts": 10,
            "dur": 5,
            "args": {"device": 0, "correlation": 7, "external id": 42},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 8,
            "dur": 1,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": "stream 7",
            "ts": 20,
            "dur": 3,
            "args": {"device": 0},
        },
    ]
    rank = load_rank(write_trace(tmp_path / "t.json", trace_doc(events)))
    dev = rank.device.sort("start_ns")
    assert dev["kind"].to_list() == ["kernel", "memcpy"]
    assert dev["stream"].to_list() == [16, 7]
    assert dev["external_id"].to_list()[0] == 42
    assert rank.launches.height == 1


def test_collective_metadata_is_kept_per_kernel(tmp_path: Path) -> None:
    meta = {
        "Collective name": "_allgather_base",
        "In msg nelems": 1024,
        "Out msg nelems": 8192,
        "Group size": 8,
        "dtype": "BFloat16",
        "Process Group Name": "0",
        "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
        "Seq": 17,
    }
    events = [
        kernel("sm90_gemm", 0, 1, 2),
        kernel("ncclDevKernel_AllGather_RING_LL(x)", 1, 2, 1, **meta),
    ]
    rank = load_rank(write_trace(tmp_path / "t.json", trace_doc(events)))
    # kept apart from the device rows, by their dev_row: the compute kernel has none
    assert rank.device_meta.height == 1
    row = rank.device_meta.row(0, named=True)
    assert rank.device.filter(pl.col("dev_row") == row["dev_row"])["name"][0].startswith("nccl")
    assert row["collective_name"] == "_allgather_base"
    assert (row["in_msg_nelems"], row["out_msg_nelems"], row["group_size"]) == (1024, 8192, 8)
    assert (row["dtype"], row["pg_name"], row["seq"]) == ("BFloat16", "0", 17)
    assert row["pg_ranks"] == "[0, 1, 2, 3, 4, 5, 6, 7]"


def test_gzip_is_sniffed_without_the_suffix(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "rank0.json", trace_doc(simple_events()), gz=True)
    assert load_rank(path).device.height == 3


def test_truncated_file_salvages_complete_events(tmp_path: Path) -> None:
    text = json.dumps(trace_doc(simple_events()), indent=1)
    cut = text[: text.rindex('"ts"')]  # a job killed while writing the last event
    rank = load_rank(write_trace(tmp_path / "rank0.json", text=cut))
    assert rank.truncated
    assert rank.device.height == 2  # the last kernel was cut off
    assert any("truncated" in w for w in rank.warnings)


def test_truncated_gzip_salvages_too(tmp_path: Path) -> None:
    import gzip

    data = gzip.compress(json.dumps(trace_doc(simple_events()), indent=1).encode(), mtime=0)
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(data[: len(data) - 40])
    rank = load_rank(path)
    assert rank.truncated and rank.device.height >= 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("this is not json", "not JSON"),
        ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "invalid JSON"),
        ('{"traceEvents": {"a": 1}}', "unexpected trace structure"),
    ],
)
def test_unusable_files_raise_trace_error_naming_the_problem(
    tmp_path: Path, content: str, message: str
) -> None:
    path = write_trace(tmp_path / "rank0.json", text=content)
    with pytest.raises(TraceError, match=message) as info:
        load_rank(path)
    assert str(path) in str(info.value)


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00garbage" * 20)
    with pytest.raises(TraceError, match="corrupt gzip"):
        load_rank(path)


def test_json_without_trace_events_is_not_a_trace(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "model.et.json", {"nodes": [], "schema": "1.0"})
    with pytest.raises(NotATrace, match="no traceEvents"):
        load_rank(path)


def test_missing_and_negative_durations_are_repaired_with_warnings(tmp_path: Path) -> None:
    events = [kernel("a", 10, -5, 1), kernel("b", 20, 3, 2)]
    del events[1]["dur"]
    rank = load_rank(write_trace(tmp_path / "rank0.json", trace_doc(events)))
    assert rank.repaired_events == 2
    assert rank.device["end_ns"].to_list() == rank.device["start_ns"].to_list()
    joined = " ".join(rank.warnings)
    assert "negative duration" in joined and "without a duration" in joined


def test_cpu_ops_are_kept_only_for_cpu_only_traces(tmp_path: Path) -> None:
    cpu = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    with_gpu = load_rank(write_trace(tmp_path / "a.json", trace_doc([cpu, *simple_events()])))
    cpu_only = load_rank(write_trace(tmp_path / "b.json", trace_doc([cpu, step(1, 0, 5)])))
    assert with_gpu.cpu.filter(with_gpu.cpu["kind"] == "cpu_op").height == 0
    assert cpu_only.cpu.filter(cpu_only.cpu["kind"] == "cpu_op").height == 1


def test_unknown_or_missing_phases_fall_back_to_the_untagged_decoder(tmp_path: Path) -> None:
    events = simple_events()
    odd: list[dict] = [
        {"ph": "Z", "name": "vendor extension"},
        {"name": "no phase at all", "ts": 1},
    ]
    flows = [
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "f", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 2, "bp": "e"},
    ]
    tagged = load_rank(write_trace(tmp_path / "a.json", trace_doc([*events, *flows])))
    untagged = load_rank(write_trace(tmp_path / "b.json", trace_doc([*events, *flows, *odd])))
    assert tagged.device.equals(untagged.device)
    assert tagged.device.height == 3 and tagged.launches.height == 3


def test_truncation_at_random_offsets_salvages_or_fails_cleanly(tmp_path: Path) -> None:
    import random

    from tracecomm.synth import fsdp_run, render_rank

    spec = fsdp_run(world_size=1, steps=2, layers=2, seed=9, gzip=False)
    text = "".join(render_rank(spec, spec.ranks[0])).encode()
    full = load_rank(write_trace(tmp_path / "full.json", text=text.decode()))
    rng = random.Random(11)
    salvaged = 0
    for cut in sorted(rng.sample(range(1, len(text)), 40)):
        path = tmp_path / f"cut{cut}.json"
        path.write_bytes(text[:cut])
        try:
            rank = load_rank(path)
        except TraceError as exc:
            assert str(path) in str(exc)
            continue
        salvaged += 1
        assert rank.device.height <= full.device.height
        # whatever was kept are the file's own events with the same times (baseTimeNanoseconds
        # is written last, so a cut file keeps relative times)
        lost_base = full.meta.base_time_ns if rank.meta.base_time_ns is None else 0
        shifted = rank.device.with_columns(
            pl.col("start_ns") + lost_base, pl.col("end_ns") + lost_base
        )
        kept = full.device.join(shifted, on=["start_ns", "end_ns", "name"], how="semi")
        assert kept.height == rank.device.height
    assert salvaged > 30


def test_matmul_and_attention_ops_keep_their_input_dims(tmp_path: Path) -> None:
    dims = {"Input Dims": [[64, 128], [128, 32]], "Concrete Inputs": ["", ""]}
    mm = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 3, "ts": 1, "dur": 2}
    bare = {**mm, "name": "aten::bmm", "ts": 4}
    path = write_trace(
        tmp_path / "a.json", trace_doc([{**mm, "args": dims}, bare, *simple_events()])
    )
    assert load_rank(path).shaped_ops.is_empty()  # shapes are kept only when asked for
    rank = load_rank(path, ReadOptions(shaped_ops=SHAPED_OPS))
    ops = rank.shaped_ops
    assert ops["name"].to_list() == ["aten::mm"]  # no shapes recorded: nothing to count
    assert json.loads(ops["input_dims"][0]) == [[64, 128], [128, 32]]
    assert json.loads(ops["concrete_inputs"][0]) == ["", ""]
    assert ops["tid"][0] == 3


@pytest.mark.parametrize(
    ("values", "text"),
    [
        (["a", None, "b"], ["a", None, "b"]),
        ([[0, 2, 4], None], ["[0, 2, 4]", None]),  # "Process Group Ranks" as a list
        (["a", 3, True, 1.5], ["a", "3", "True", "1.5"]),
        ([None, None], [None, None]),
    ],
)
def test_text_columns_take_any_json_value_as_its_text(
    values: list[object], text: list[str | None]
) -> None:
    """A text argument (process group ranks, names) that a writer spells as a number, a list
    or a boolean is kept as its Python text, so mixed files stay one String column."""
    from tracecomm.ingest.frames import typed_series

    out = typed_series("pg_ranks", values, pl.String())
    assert out.dtype == pl.String and out.to_list() == text
