"""The C scanner (ingest/_scan.c + fast.py) against the general msgspec reader: the same
frames on every kind of input, and a clean refusal (None) on anything it does not handle."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import SAMPLE_RUN, kernel, launch, simple_events, trace_doc
from tracecomm.ingest import fast, load_rank, stream
from tracecomm.ingest.model import RankEvents, ReadOptions
from tracecomm.mfu.opflops import SHAPED_OPS
from tracecomm.synth import dp_pp_run, dp_tp_run, fsdp_run
from tracecomm.synth.shapes import with_shapes
from tracecomm.synth.writer import write_run

FRAMES = (
    "device",
    "device_meta",
    "launches",
    "steps",
    "comm_annotations",
    "comm_ops",
    "shaped_ops",
    "gpu_ranges",
    "cpu",
)

if not fast.available() and os.environ.get("TRACECOMM_REQUIRE_SCANNER"):
    raise RuntimeError("the C scanner (tracecomm/ingest/_scan.c) was not built")
pytestmark = pytest.mark.skipif(not fast.available(), reason="the C scanner was not built")


# the FLOP counter's ops: their shapes are kept, so the differential covers them too
READ = ReadOptions(shaped_ops=SHAPED_OPS)


def both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RankEvents, RankEvents]:
    scanned = load_rank(path, READ)
    with monkeypatch.context() as m:
        m.setattr(fast, "_scan", None)
        general = load_rank(path, READ)
    return scanned, general


def assert_same(a: RankEvents, b: RankEvents) -> None:
    for name in FRAMES:
        assert_frame_equal(getattr(a, name), getattr(b, name), check_dtypes=True), name
    assert (a.meta, a.warnings, a.truncated, a.repaired_events) == (
        b.meta,
        b.warnings,
        b.truncated,
        b.repaired_events,
    )


def generated(tmp_path: Path) -> list[Path]:
    paths = []
    paths += write_run(fsdp_run(world_size=2, seed=1, naming="legacy"), tmp_path / "a")
    paths += write_run(fsdp_run(world_size=2, time_format="epoch_us", gzip=False), tmp_path / "b")
    paths += write_run(dp_tp_run(dp=2, tp=2), tmp_path / "c")
    paths += write_run(dp_pp_run(dp=1, pp=2), tmp_path / "d")
    paths += write_run(with_shapes(fsdp_run(world_size=1)), tmp_path / "e")
    paths += write_run(fsdp_run(world_size=1, idle_detail=True), tmp_path / "f")
    return paths


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "chunked"])
def test_same_frames_as_the_general_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    if chunked:  # small files through the streaming reader, many chunks each
        monkeypatch.setattr(stream, "STREAM_FROM_BYTES", 0)
        monkeypatch.setattr(stream, "CHUNK_BYTES", 64 << 10)
    paths = [*sorted(SAMPLE_RUN.glob("*.json.gz")), *generated(tmp_path)]
    scanned_chunks: list[Path] = []
    real_columns = fast.columns

    def spy(text: bytes | memoryview, path: Path, *args: object, **kwargs: object) -> object:
        got = real_columns(text, path, *args, **kwargs)  # type: ignore[arg-type]
        if got is not None:
            scanned_chunks.append(path)
        return got

    monkeypatch.setattr(fast, "columns", spy)
    for path in paths:
        scanned, general = both(path, monkeypatch)
        assert scanned.device.height > 0, path
        # the scanner read it (a whole file in its {"traceEvents": …} envelope too), else this
        # compares the general reader with itself; streamed, a file that fits in the header's
        # first read (1 MiB) is all tail, which the general reader takes
        assert path in scanned_chunks or chunked, path
        scanned_chunks.clear()
        assert_same(scanned, general)


def test_same_frames_on_the_real_traces(
    shared_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in sorted(shared_traces.rglob("*.json*")):
        try:
            scanned, general = both(path, monkeypatch)
        except Exception as exc:  # the readers must fail alike too
            with monkeypatch.context() as m:
                m.setattr(fast, "_scan", None)
                with pytest.raises(type(exc)):
                    load_rank(path, READ)
            continue
        assert_same(scanned, general)


def scan(events: list[dict] | str) -> dict | None:
    text = events if isinstance(events, str) else json.dumps(events)
    return fast._scan.scan(text.encode()) if fast._scan else None


def column(got: dict, name: str) -> list[int | None]:
    values = np.frombuffer(got[name], dtype=np.int64).tolist()
    valid = np.frombuffer(got[f"{name}_valid"], dtype=np.uint8).tolist()
    return [v if ok else None for v, ok in zip(values, valid, strict=True)]


def test_exact_nanoseconds_and_rounding() -> None:
    text = (
        '[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":5077185321273.005,'
        '"dur":1.2345},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":-0.0005,'
        '"dur":3},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":null,'
        '"dur":9223372036854775.5}]'
    )
    got = scan(text)
    assert got is not None
    assert column(got, "ts_ns") == [5077185321273005, -1, None]
    assert column(got, "dur_ns") == [1235, 3000, None]  # beyond int64 ns: null, as the reader


def test_escapes_metadata_flags_and_odd_links() -> None:
    events = [
        kernel('nccl"AllReduce\\u00e9', 10, 5, 1, **{"Collective name": "allreduce", "Seq": 3}),
        kernel("sm90_gemm", 20, 5, None, correlation="17"),  # a quoted correlation
        launch(1, 1),
    ]
    got = scan(events)
    assert got is not None
    names = [json.loads(b'"' + v + b'"') for v in got["name_values"]]
    assert 'nccl"AllReduce\\u00e9' in names
    flags = np.frombuffer(got["flags"], dtype=np.uint8).tolist()
    assert flags[0] & fast.FLAG_META and not flags[1] & fast.FLAG_META
    assert flags[1] & fast.FLAG_ODD and column(got, "correlation")[1] is None


@pytest.mark.parametrize(
    "text",
    [
        '[{"ph":"B","name":"x","pid":1,"tid":1,"ts":1}]',  # B/E pairs: the general reader
        '[{"name":"x","pid":1,"tid":1,"ts":1}]',  # no phase
        '[{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":1,"ts":1e3,"dur":1}',  # cut
        '[{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":1,"ts":1,"dur":1},]',  # comma
        '[{"ph":"X","cat":"kernel" "name":"k"}]',  # a missing colon/comma
        "[1, 2]",
        "{}",
    ],
)
def test_declines_what_it_does_not_handle(text: str) -> None:
    assert scan(text) is None


def test_a_kept_event_of_an_odd_shape_sends_the_chunk_to_the_general_reader(
    tmp_path: Path,
) -> None:
    odd = {**simple_events()[4], "pid": "GPU 0"}  # a kept kernel with a string pid
    text = json.dumps([*simple_events(), odd]).encode()
    assert fast.columns(text, tmp_path / "x.json", None, SHAPED_OPS) is None
    spans = {"ph": "X", "cat": "Trace", "name": "t", "pid": "Spans", "tid": "P", "ts": 1, "dur": 9}
    text = json.dumps([*simple_events(), spans]).encode()  # not kept: no matter
    assert fast.columns(text, tmp_path / "x.json", None, SHAPED_OPS) is not None


def test_events_without_a_category_are_not_kept(tmp_path: Path) -> None:
    bare = {k: v for k, v in simple_events()[4].items() if k != "cat"}  # a kernel, no "cat"
    text = json.dumps([*simple_events(), bare]).encode()
    got = fast.columns(text, tmp_path / "x.json", None, SHAPED_OPS)
    assert got is not None
    frame, _, _, _ = got
    assert frame.height == len(simple_events())  # the step, 3 launches, 3 kernels


def test_invalid_utf8_in_a_name_takes_the_general_path(tmp_path: Path) -> None:
    doc = json.dumps(trace_doc(simple_events())).encode().replace(b"sm90_gemm", b"sm90\xff_gemm")
    path = tmp_path / "rank0.json"
    path.write_bytes(doc)
    rank = load_rank(path)
    assert any("invalid UTF-8" in w for w in rank.warnings)
    assert "sm90\ufffd_gemm" in rank.device["name"].to_list()


def test_white_space_escapes_long_names_and_big_ints_as_json_reads_them() -> None:
    """The scanner's 16-byte paths (white space runs, a string's closing quote, names hashed by
    words) and its 19-digit integer path give what ``json.loads`` gives, at every length
    around their edges; a value past int64 is not a plain int (the general reader's)."""
    rng = random.Random(11)
    blanks = [" ", "\n", "\r", "\t"]
    names = [
        "x" * n + tail
        for n in range(0, 40)
        for tail in ("", '\\"q', "\\\\", "\\u00e9")  # an escaped quote, a backslash, é
    ]
    # 32+ bytes alike in their first and last 16: told apart though their hashes agree
    names += ["a" * 16 + middle + "z" * 16 for middle in ("1", "2", "12", "21", "")]
    events, pids = [], []
    for i, name in enumerate(names):
        pid = rng.choice([0, 7, 10**18, 9 * 10**18, 2**63 - 1, -(2**63), rng.randrange(10**12)])
        pids.append(pid)
        gap = "".join(rng.choice(blanks) for _ in range(rng.randrange(0, 40)))
        events.append(
            f'{gap}{{{gap}"ph"{gap}:{gap}"X",{gap}"cat":"kernel",{gap}"name":{gap}"{name}"'
            f',"pid":{gap}{pid},"tid":{i}{gap},"ts":{i}.5,"dur":1{gap}}}{gap}'
        )
    text = "[" + ",".join(events) + "]"
    want = json.loads(text)
    got = scan(text)
    assert got is not None
    codes = np.frombuffer(got["name_code"], dtype=np.uint32).tolist()
    values = [json.loads(b'"' + v + b'"') for v in got["name_values"]]
    assert [values[c] for c in codes] == [e["name"] for e in want]
    assert len(values) == len({e["name"] for e in want})
    assert column(got, "pid") == pids
    assert column(got, "tid") == list(range(len(names)))
    assert column(got, "ts_ns") == [i * 1000 + 500 for i in range(len(names))]
    for past in (2**63, 10**19 - 1, 10**19 * 9, 10**25):  # not int64: the general reader's
        odd = scan(text.replace('"tid":0', f'"tid":{past}', 1))
        assert odd is not None
        assert np.frombuffer(odd["flags"], dtype=np.uint8)[0] & fast.FLAG_BAD
    for blank in ("\v", "\f", "\x00"):  # not JSON's white space
        assert scan(f"[{blank}" + text[1:]) is None


def test_random_damage_never_crashes() -> None:
    """Every mutation ends in a result or None: never a crash, never a hang."""
    base = json.dumps(trace_doc(simple_events())["traceEvents"]).encode()
    rng = random.Random(7)
    results = 0
    for _ in range(2000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = bytes(data[: rng.randint(0, len(data))]) if rng.random() < 0.3 else bytes(data)
        got = fast._scan.scan(cut) if fast._scan else None
        results += got is not None
    assert 0 < results < 2000


def test_whole_file_and_stream_agree_on_a_big_generated_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path,) = write_run(fsdp_run(world_size=1, scale=3, gzip=False), tmp_path)
    whole = load_rank(path)
    monkeypatch.setattr(stream, "STREAM_FROM_BYTES", 0)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 256 << 10)
    assert_same(load_rank(path), whole)
    assert whole.device.height == pl.Series(whole.device["dev_row"]).n_unique()


def test_a_head_buffer_reads_as_events_before_the_text() -> None:
    """``scan(body, True, head)``: the rows of ``head + "," + body`` scanned whole, with args
    offsets counted from head's start and body's from head's end (the separator is not in
    either buffer); the frames ``fast.columns`` builds are the same."""
    from tracecomm.ingest import _scan

    events = [json.dumps(e).encode() for e in simple_events()] * 3
    events.append(json.dumps(kernel("ncclKernel_AllReduce", 50, 5, 9, **{"Seq": 4})).encode())
    head, body = b", ".join(events[:4]), b", ".join(events[4:])
    split = _scan.scan(body, True, head)
    whole = _scan.scan(head + b"," + body, True)
    assert split is not None and whole is not None
    at, at_whole = (np.frombuffer(d["args_at"], dtype=np.int64) for d in (split, whole))
    in_body = at_whole > len(head)
    assert in_body.any() and (~in_body).any()
    assert (at[in_body] == at_whole[in_body] - 1).all() and (
        at[~in_body] == at_whole[~in_body]
    ).all()
    for key in set(whole) - {"args_at"}:  # columns are buffers, string tables lists
        assert _plain(split[key]) == _plain(whole[key]), key
    read = ReadOptions()
    parts = fast.columns(body, Path("t"), None, read.shaped_ops, True, head)
    joined = fast.columns(head + b"," + body, Path("t"), None, read.shaped_ops, True)
    assert parts is not None and joined is not None
    assert_frame_equal(parts[0], joined[0])
    assert parts[0]["seq"].drop_nulls().to_list() == [4]  # the kernel in body: its args read


def _plain(value: Any) -> object:
    return value if isinstance(value, list) else bytes(memoryview(value))


def test_columns_are_read_only_buffers_that_outlive_the_scan() -> None:
    """The scan's columns come out without a copy: buffers of their own type (not ``bytes``)
    that numpy reads in place, read-only, alive as long as a view of them is, however much
    is allocated and freed after."""
    from tracecomm.ingest import _scan

    events = [dict(e, ts=e["ts"] + 7 * i) for i in range(2000) for e in simple_events()]
    text = json.dumps(events).encode()
    got = _scan.scan(text)
    assert got is not None
    column = got.pop("ts_ns")
    assert not isinstance(column, bytes) and type(column).__name__ == "Column"
    ts = np.frombuffer(column, dtype=np.int64)  # the view holds the only reference
    del got, column
    assert ts.base is not None and not ts.flags.writeable
    for _ in range(5):  # memory freed here and allocated again by the next scans
        again = _scan.scan(text)
        assert again is not None
        del again
    want = [e["ts"] * 1000 for e in events if e.get("ph") == "X"]
    assert ts.tolist() == want
