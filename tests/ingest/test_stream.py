"""The chunked reader of large traces gives exactly the whole-file reader's columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import SAMPLE_RUN, simple_events, trace_doc, write_trace
from tracecomm.ingest import stream
from tracecomm.ingest.load import _load_rank
from tracecomm.ingest.model import RankEvents, ReadOptions
from tracecomm.mfu.opflops import SHAPED_OPS
from tracecomm.synth import fsdp_run, write_run
from tracecomm.synth.shapes import with_shapes

READ = ReadOptions(shaped_ops=SHAPED_OPS)  # shapes kept: the test compares them too
FRAMES = ("device", "launches", "steps", "comm_annotations", "comm_ops", "cpu", "shaped_ops")


def both(
    path: Path, monkeypatch: pytest.MonkeyPatch, batch: int = stream.SPLIT_BATCH_BYTES
) -> tuple[RankEvents, RankEvents]:
    whole = _load_rank(path, READ)
    monkeypatch.setattr(stream, "STREAM_FROM_BYTES", 0)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 50_000)  # many chunks even for small files
    monkeypatch.setattr(stream, "SPLIT_BATCH_BYTES", batch)
    chunked = stream.stream_rank(path, READ)
    return whole, chunked


# the chunks split one at a time (each one over the bound), a few together, all together
@pytest.mark.parametrize("batch", [1, 200_000, stream.SPLIT_BATCH_BYTES])
@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLE_RUN.iterdir())[:2])
def test_chunks_equal_the_whole_file(
    name: str, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, chunked = both(SAMPLE_RUN / name, monkeypatch, batch)
    for frame in FRAMES:
        assert_frame_equal(getattr(chunked, frame), getattr(whole, frame))
    assert chunked.meta == whole.meta
    assert chunked.meta.base_time_ns is not None  # written after the event array


def test_shapes_cpu_only_and_begin_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(with_shapes(fsdp_run(world_size=1, steps=2, seed=1)), tmp_path / "shapes")
    path = next((tmp_path / "shapes").iterdir())
    whole, chunked = both(path, monkeypatch)
    assert_frame_equal(chunked.shaped_ops, whole.shaped_ops)
    events = [dict(e, cat="cpu_op") for e in simple_events()] * 500  # no device work at all
    cpu = write_trace(tmp_path / "cpu.json", trace_doc(events, world=1))
    whole, chunked = both(cpu, monkeypatch)
    assert_frame_equal(chunked.cpu, whole.cpu)
    assert chunked.cpu.height == 3500


def test_truncated_or_odd_files_fall_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (next(SAMPLE_RUN.iterdir())).read_bytes()
    import gzip

    data = gzip.decompress(text)
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    monkeypatch.setattr(stream, "CHUNK_BYTES", 50_000)
    with pytest.raises(stream.Fallback):
        stream.stream_rank(cut, READ)
    monkeypatch.setattr(stream, "STREAM_FROM_BYTES", 0)
    events = _load_rank(cut, READ)  # the whole-file reader salvages it
    assert events.truncated and events.device.height > 0
    assert isinstance(events.device, pl.DataFrame)


def _last_match(buf: bytes) -> tuple[int, int] | None:
    """The definition: the last ``}, {`` within the buffer's last MiB."""
    from tracecomm.ingest.events import EVENT_BOUNDARY

    start = max(0, len(buf) - (1 << 20))
    found = [m for m in EVENT_BOUNDARY.finditer(buf) if m.start() >= start]
    return (found[-1].start() + 1, found[-1].end() - 1) if found else None


@pytest.mark.parametrize(
    "buf",
    [
        b"",
        b'{"a": 1}',
        b'{"a": 1}, {"b": 2}',
        b'{"a": 1}  ,\n  {"b": 2}, {"c"',
        # the last boundary 100 KiB from the end: past the first, short look
        b'{"a": 1},\n{"b": "' + b"x" * (100 << 10) + b'"',
        # a boundary cut by the short look's start: the longer one finds it whole
        b'{"a": 1}' + b" " * 40 + b"," + b" " * ((1 << 16) - 2) + b'{"b": 2',
        # the only boundary more than 1 MiB from the end: none
        b'{"a": 1}, {"b": "' + b"x" * ((1 << 20) + 10) + b'"',
    ],
)
def test_the_last_event_boundary_is_the_last_within_a_mib(buf: bytes) -> None:
    assert stream._last_boundary(buf) == _last_match(buf)


@pytest.mark.parametrize("chunk", [4099, 50_000])
def test_pretty_printed_trace_cut_anywhere(
    chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whitespace around the boundaries (a boundary may straddle two reads), and strings
    holding ``}, {`` (a boundary the search may find inside an event, where the stream gives
    way to the whole-file reader): the same columns as the file read whole."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(next(SAMPLE_RUN.iterdir()).read_bytes()))
    events = doc["traceEvents"]
    for i in range(0, len(events), 997):
        events[i]["name"] = 'odd"}, {"name'
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps(doc, indent=2))
    whole = _load_rank(path, READ)
    monkeypatch.setattr(stream, "STREAM_FROM_BYTES", 0)
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    chunked = _load_rank(path, READ)
    for frame in FRAMES:
        assert_frame_equal(getattr(chunked, frame), getattr(whole, frame))
    assert whole.device.height > 500


def test_chunks_are_the_file_bytes_and_bodies_are_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run's head + sep + body, joined by the boundaries' own separators, then the
    remainder: the array as written. A body is a view of the one buffer every read fills
    (not copied, and no fresh memory each read): it holds its run until the next is taken."""
    sep = b",\n  "
    events = sep.join(
        b'{"ph": "X", "name": "k%d", "ts": %d, "dur": 1}' % (i, i) for i in range(40_000)
    )
    trailer = b'], "x": 1}'
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [' + events + trailer)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    with path.open("rb") as handle:
        _, rest = stream._header(handle, path)
        pieces = [(p.text(), p.final, p.body) for p in stream._chunks(handle, rest, path, READ)]
    assert len(pieces) > 50
    assert pieces[-1][1] and not any(final for _, final, _ in pieces[:-1])
    assert sep.join(text for text, _, _ in pieces) == events + trailer
    bodies = [body for _, _, body in pieces if isinstance(body, memoryview) and len(body) > 500]
    assert len({id(body.obj) for body in bodies}) == 1 and len(bodies) > 50


@pytest.mark.parametrize("last", ["kernel", "begin_end"])
def test_the_arrays_last_events_are_read_as_the_rest(
    last: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events after the last read's last boundary (a kernel here, then the array's end
    and the trailer's baseTimeNanoseconds) go through the scanner like every other run: the
    general reader is not called.
    A B / E pair at the end still goes to the general reader, which pairs them. Either way,
    the columns the whole-file reader reads."""
    steps = 1000  # over the first read's 1 MiB (the header's), so the array is read in chunks
    events = [e for i in range(steps) for e in simple_events(1000 + 1000 * i)]
    if last == "begin_end":
        end = 1000 + 1000 * steps
        events += [
            {"ph": "B", "cat": "user_annotation", "name": "t", "pid": 1, "tid": 1, "ts": end},
            {"ph": "E", "cat": "user_annotation", "name": "t", "pid": 1, "tid": 1, "ts": end + 9},
        ]
    text = json.dumps(trace_doc(events), indent=1)  # traceEvents last: the trailer after it
    assert text.endswith("]\n}")
    text = text[:-1] + ', "baseTimeNanoseconds": 5}'
    path = write_trace(tmp_path / "t.json", text=text)
    assert path.stat().st_size > (1 << 20) + 2 * 50_000
    taken: list[int] = []
    real_take = stream._take

    def take(events: list[Any], *rest: Any) -> int:
        taken.append(len(events))
        return real_take(events, *rest)

    monkeypatch.setattr(stream, "_take", take)
    whole, chunked = both(path, monkeypatch)
    for frame in FRAMES:
        assert_frame_equal(getattr(chunked, frame), getattr(whole, frame))
    assert chunked.device.height == 3 * steps
    assert chunked.meta.base_time_ns == whole.meta.base_time_ns == 5
    if last == "kernel":
        assert taken == []
    else:  # the runs that hold B or E, then the pair as one event
        assert taken[-1] == 1 and len(taken) >= 2
