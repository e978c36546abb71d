"""Issue 18, Flight Recorder part: dumps built to hurt. Each is bounded work that ends in a
one-line FlightRecorderError naming the file and the limit (or loads as plain data), and a bad
dump in a run folder is a warning: `tracecomm nccl` and `analyze` still report (never exit 70).
"""

from __future__ import annotations

import json
import pickle
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN
from tracecomm.cli import EXIT_INTERNAL, EXIT_OK, app
from tracecomm.nccl.flight import FlightRecorderError, divergences, load_dump


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    """Every test here ends within 20 s, or fails (a hang is a finding of issue 18)."""

    def _expire(*_: object) -> None:
        raise TimeoutError("took more than 20 s: unbounded work")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def entry(seq: Any = 1, **extra: Any) -> dict[str, Any]:
    return {
        "record_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "profiling_name": "nccl:all_reduce",
        "input_sizes": [[4]],
        "output_sizes": [[4]],
        "state": "completed",
        "is_p2p": False,
        **extra,
    }


def dump(entries: list[Any], **extra: Any) -> dict[str, Any]:
    return {"version": "2.10", "pg_config": {}, "entries": entries, **extra}


def write(folder: Path, raw: bytes, name: str = "nccl_trace_rank_0") -> Path:
    path = folder / name
    path.write_bytes(raw)
    return path


def nested_shared(levels: int) -> list[Any]:
    inner: list[Any] = [1]
    for _ in range(levels):
        inner = [inner, inner]  # pickled once, referenced twice: 2**levels leaves
    return inner


def test_nested_shared_lists_are_bounded(tmp_path: Path) -> None:
    raw = pickle.dumps(dump([entry(input_sizes=nested_shared(60))]))
    assert len(raw) < 700  # the 566-byte dump of the issue is of this kind
    started = time.perf_counter()
    with pytest.raises(FlightRecorderError, match="shared references expand past"):
        load_dump(write(tmp_path, raw))
    assert time.perf_counter() - started < 2


# (what is pickled, what is expected: None = loads, else the error's text)
SHAPES: list[tuple[str, Any, str | None]] = [
    ("bytes values", dump([entry(profiling_name=b"nccl:all_reduce", state=b"started")]), None),
    ("sets", dump([entry(input_sizes={1, 2})], pg_config={"0": {"ranks": {0, 1}}}), None),
    ("non-integer seq", dump([entry(seq=3.5)]), "collective_seq_id is not an integer"),
    ("text seq", dump([entry(seq="twelve")]), "collective_seq_id is not an integer"),
    ("10,000-digit seq", dump([entry(seq=10**10_000)]), "collective_seq_id is not an integer"),
    ("bool seq", dump([entry(seq=True)]), "collective_seq_id is not an integer"),
    ("infinite seq", dump([entry(seq=float("inf"))]), "collective_seq_id is not an integer"),
    ("entries not a list", dump([]) | {"entries": {"a": 1}}, "entries is not a list"),
    ("odd version", dump([]) | {"version": [2, 10]}, "no readable schema version"),
    ("huge rank list", dump([], pg_config={"0": {"ranks": "9" * 20_000}}), None),
    ("deep nesting", dump([entry(input_sizes=json.loads("[" * 200 + "]" * 200))]), "deeper"),
]


@pytest.mark.parametrize(("shape", "doc", "error"), SHAPES, ids=[s[0] for s in SHAPES])
def test_unexpected_pickle_shapes(tmp_path: Path, shape: str, doc: Any, error: str | None) -> None:
    path = write(tmp_path, pickle.dumps(doc))
    if error is None:
        fr = load_dump(path)
        divergences([fr])
    else:
        with pytest.raises(FlightRecorderError, match=error) as caught:
            load_dump(path)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_cycle(tmp_path: Path) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(FlightRecorderError, match="cycle"):
        load_dump(write(tmp_path, pickle.dumps(dump([entry(input_sizes=loop)]))))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"version": "2.10", "entries": [{"collective_seq_id": Infinity}]}', "not an integer"),
        ('{"version": "2.10", "entries": [{"collective_seq_id": NaN}]}', "not an integer"),
        ('{"version": "2.10", "entries": [{"collective_seq_id": ' + "9" * 10_000 + "}]}", "dump"),
        ("[" * 100_000 + "]" * 100_000, "not a Flight Recorder dump"),
        ('{"version": "2.10", "entries": [1, "x", null]}', None),
    ],
)
def test_unexpected_json_shapes(tmp_path: Path, text: str, error: str | None) -> None:
    path = write(tmp_path, text.encode(), "nccl_trace_rank_3.json")
    if error is None:
        assert load_dump(path).entries == ()
    else:
        with pytest.raises(FlightRecorderError, match=error):
            load_dump(path)


def test_a_memo_bomb_is_refused_unloaded(tmp_path: Path) -> None:
    # EMPTY_LIST, LONG_BINPUT 2**31-1: the C unpickler would size its memo to 2**32 slots
    path = write(tmp_path, b"\x80\x02]r\xff\xff\xff\x7f.")
    with pytest.raises(FlightRecorderError, match="TRACECOMM_MAX_FR_MEMO raises the limit"):
        load_dump(path)


@pytest.mark.parametrize(
    ("variable", "value", "error"),
    [
        ("TRACECOMM_MAX_FR_OBJECTS", "50", "more than 50 objects"),
        ("TRACECOMM_MAX_FR_MEMO", "3", "memo goes past 3 entries"),
        ("TRACECOMM_MAX_FR_DEPTH", "3", "nested deeper than 3 levels"),
        ("TRACECOMM_MAX_FR_BYTES", "100", "over the 100 bytes read"),
    ],
)
def test_each_limit_names_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, error: str
) -> None:
    path = write(tmp_path, pickle.dumps(dump([entry(s) for s in range(20)])))
    load_dump(path)  # within the defaults
    monkeypatch.setenv(variable, value)
    with pytest.raises(FlightRecorderError, match=error) as caught:
        load_dump(path)
    assert variable in str(caught.value)


def test_bad_dumps_are_warnings_for_nccl_and_analyze(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for f in SAMPLE_RUN.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    loop: list[Any] = []
    loop.append(loop)
    bad = [
        pickle.dumps(dump([entry(input_sizes=nested_shared(60))])),
        pickle.dumps(dump([entry(seq=10**10_000)])),
        pickle.dumps(dump([entry(input_sizes=loop)])),
        b'{"version": "2.10", "entries": [{"collective_seq_id": Infinity}]}',
        b"\x80\x02]r\xff\xff\xff\x7f.",
    ]
    for rank, raw in enumerate(bad):
        write(run, raw, f"nccl_trace_rank_{rank}" + (".json" if raw[:1] == b"{" else ""))
    write(run, pickle.dumps(dump([entry(1)])), "nccl_trace_rank_9")  # one good dump
    result = CliRunner().invoke(app, ["nccl", str(run), "-f", "json"])
    assert result.exit_code == EXIT_OK, result.output
    assert result.stderr.count("Flight Recorder dump skipped") == len(bad)
    assert json.loads(result.stdout)["nccl"]["flight_recorder_dumps"] == 1
    result = CliRunner().invoke(app, ["analyze", str(run), "-f", "json"])
    assert result.exit_code not in (EXIT_INTERNAL, 1), result.output
    assert json.loads(result.stdout)["nccl"]["flight_recorder_dumps"] == 1
    assert result.stderr.count("Flight Recorder dump skipped") == len(bad)


def test_dump_text_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    evil = "\x1b]0;pwned\x07\x1b[2J"
    for rank, state in ((0, "completed"), (1, "started")):
        doc = dump([entry(1, state=state, profiling_name=evil, process_group=(evil, evil))])
        write(tmp_path, pickle.dumps(doc), f"nccl_trace_rank_{rank}")
    result = CliRunner().invoke(app, ["nccl", str(tmp_path)])
    assert result.exit_code == EXIT_OK, result.output
    assert "Flight Recorder" in result.stdout and "\x1b" not in result.stdout
    assert "\\x1b]0;pwned\\x07" in result.stdout
