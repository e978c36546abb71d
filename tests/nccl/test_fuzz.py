"""Property-based fuzzing (hypothesis, derandomized, bounded examples): log lines, log files and
Flight Recorder dumps of any shape go through the parser, the diagnosis, the JSON document and
the ``tracecomm nccl`` CLI without an exception other than the documented ones, in bounded
time. A line is counted (known / unknown), never an error."""

from __future__ import annotations

import io
import json
import math
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN
from tracecomm.cli import EXIT_NO_INPUT, EXIT_OK, app
from tracecomm.nccl.diagnose import summarize
from tracecomm.nccl.discover import analyze_nccl, discover
from tracecomm.nccl.flight import FlightRecorderError, divergences, load_dump
from tracecomm.nccl.model import NcclLog
from tracecomm.nccl.parse import parse_stream, parse_text

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "tracecomm" / "schema" / "nccl.schema.json").read_text()
)
FUZZ = settings(
    derandomize=True,
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# pieces of every family the parser reads, to be cut, glued and repeated
FRAGMENTS = [
    "gpu-a01:4242:4250 [3] NCCL INFO ",
    "[pod-name]:1:7510 [0] NCCL INFO ",
    "<cluster_name>:919:1150 [0] NCCL WARN ",
    "h:1:2 [0] misc/socket.cc:63 NCCL WARN ",
    "[1,3]<stdout>:",
    "10.0.0.7: ",
    "(RayWorkerVllm pid=5235) ",
    " [36m",
    "\x1b[0m",
    "[default0]:",
    "**",
    "`",
    "Using network Socket",
    "NET/IB : No device found.",
    "Failed to open libibverbs.so[.1]",
    "NCCL_IB_DISABLE set by environment to 1.",
    "Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0",
    "Ring 00 : 1 -> 0 [receive] via NET/Socket/0",
    "comm 0x55d0 rank 3 nranks 16 cudaDev 3 busId 1b000 commId 0x12 - Init COMPLETE",
    "comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
    "24 coll channels, 0 nvls channels, 32 p2p channels, 2 p2p channels per peer",
    "AllReduce: opCount 3f sendbuff 0x1 recvbuff 0x2 count 99 datatype 9 op 0 root 0 comm "
    "0x55d0 [nranks=16] stream 0x3",
    "NCCL version 2.19.3+cuda12.3",
    "RCCL version : 2.21.5-HEAD:9a0e6a1",
    "#  Rank  3 Group  0 Pid  58192 on z292 device  3",
    "[rank4]:[E318 07:39:53.79 ProcessGroupNCCL.cpp:616] ",
    "[E ProcessGroupNCCL.cpp:458] ",
    "[Rank 4] ",
    "[PG ID 2 PG GUID 9(dp) Rank 4] ",
    "[PG 1 Rank 0] ",
    "Watchdog caught collective operation timeout: ",
    "WorkNCCL(SeqNum=610, OpType=COALESCED, NumelIn=56320, NumelOut=450560, Timeout(ms)=600000)",
    "WorkNCCL(SeqNum=",
    " ran for 600086 milliseconds before timing out.",
    "Exception (either an error or timeout) detected by watchdog at work: 610, ",
    "last enqueued NCCL work: 616, last completed NCCL work: 609.",
    "failure detected by watchdog at work sequence id: 57 PG status: last enqueued work: 57",
    "Timeout at collective: ALLREDUCE, #17 [0, 1] joined but didn't finish collective #17",
    "ProcessGroupNCCL environments: NCCL version: 2.20.5, TORCH_NCCL_ASYNC_ERROR_HANDLING: 1",
    "ProcessGroupNCCL initialization options: size: 8, global rank: 2",
    "watchdog got stuck for 480 seconds",
    "9" * 60,
    ":",
    " ",
    "[",
    "]",
    "(",
    ")",
    "\t",
    "\u202e",
    "\x00",
]
_line = st.one_of(
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8).map("".join),
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6)
    .map("".join)
    .flatmap(
        lambda s: st.integers(0, len(s)).map(lambda cut: s[:cut])  # cut at 1023 bytes, or anywhere
    ),
)
_text = st.lists(_line, max_size=25).map("\n".join)


def _check(log: NcclLog) -> None:
    s = summarize(log)
    doc = {
        "kind": "tracecomm-nccl",
        "schema_version": 2,
        "nccl": msgspec.to_builtins(s),
        "warnings": [],
    }
    jsonschema.validate(json.loads(json.dumps(doc)), SCHEMA)
    assert s.lines >= 0 and 0 <= s.unknown_lines <= s.nccl_lines


@FUZZ
@given(_text)
def test_any_text_parses_and_diagnoses(text: str) -> None:
    started = time.perf_counter()
    log = parse_text(text)
    _check(log)
    assert time.perf_counter() - started < 5


@FUZZ
@given(st.binary(max_size=1500), st.integers(64, 600))
def test_any_bytes_stream_in_any_blocks(data: bytes, block: int) -> None:
    small, whole = NcclLog(), NcclLog()
    parse_stream(io.BytesIO(data), small, block_size=block)
    parse_stream(io.BytesIO(data), whole)
    _check(small)
    assert small.lines == whole.lines


@FUZZ
@given(_text, st.integers(64, 600))
def test_block_cuts_change_no_count(text: str, block: int) -> None:
    # lines shorter than a block: cutting the stream anywhere reads the same records
    text = "\n".join(line[: block // 2] for line in text.split("\n"))
    small, whole = NcclLog(), NcclLog()
    parse_stream(io.BytesIO(text.encode()), small, block_size=block)
    parse_stream(io.BytesIO(text.encode()), whole)
    assert (small.lines, small.nccl_lines, small.unknown, small.watchdog_lines) == (
        whole.lines,
        whole.nccl_lines,
        whole.unknown,
        whole.watchdog_lines,
    )


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.sampled_from(["2.10", "2.9", "1.5", "nccl:all_reduce", "completed", "started", "0"]),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(st.integers(0, 9), max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers(0, 5)), inner, max_size=5),
    ),
    max_leaves=30,
)
_entry = st.fixed_dictionaries(
    {},
    optional={
        "collective_seq_id": _value,
        "p2p_seq_id": _value,
        "record_id": _value,
        "process_group": _value,
        "profiling_name": _value,
        "state": _value,
        "is_p2p": _value,
        "input_sizes": _value,
        "output_sizes": _value,
    },
)
_dump = st.fixed_dictionaries(
    {"entries": st.one_of(st.lists(st.one_of(_entry, _value), max_size=6), _value)},
    optional={
        "version": st.one_of(st.just("2.10"), _value),
        "comm_lib_version": _value,
        "pg_config": _value,
        "pg_status": _value,
    },
)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, (set, frozenset, tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return value  # json.dumps writes Infinity / NaN, as some writers do
    return value


@FUZZ
@given(st.one_of(_dump, _value), st.booleans(), st.integers(0, 7))
def test_any_dump_loads_or_is_refused(doc: Any, as_json: bool, rank: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        name = f"nccl_trace_rank_{rank}" + (".json" if as_json else "")
        path = Path(folder) / name
        raw = json.dumps(_jsonable(doc)).encode() if as_json else pickle.dumps(doc, protocol=4)
        path.write_bytes(raw if not as_json or raw[:1] in b"{[" else b"{" + raw)
        started = time.perf_counter()
        try:
            dump = load_dump(path)
        except FlightRecorderError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
        else:
            divergences([dump, dump])
            summarize(NcclLog(), [dump])
        assert time.perf_counter() - started < 5


@settings(derandomize=True, max_examples=25, deadline=None)
@given(_text, st.one_of(_dump, st.binary(max_size=200)))
def test_the_nccl_command_never_crashes(text: str, doc: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "job.log").write_text("NCCL INFO\n" + text, errors="surrogatepass")
        raw = doc if isinstance(doc, bytes) else pickle.dumps(doc)
        (root / "nccl_trace_rank_0").write_bytes(raw)
        found = discover([root])
        summary, warnings = analyze_nccl(found)
        assert summary is not None and all("\n" not in w for w in warnings)
        for argv in (["nccl", folder], ["nccl", folder, "-f", "json"]):
            result = CliRunner().invoke(app, argv)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                result.exception
            )
            assert result.exit_code in (EXIT_OK, EXIT_NO_INPUT)
            assert "\x1b" not in result.stdout


@settings(derandomize=True, max_examples=4, deadline=None)
@given(_text, _dump)
def test_analyze_of_a_run_folder_with_fuzzed_nccl_inputs(text: str, doc: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        for f in SAMPLE_RUN.iterdir():
            (run / f.name).write_bytes(f.read_bytes())
        (run / "job.log").write_text("NCCL INFO\n" + text, errors="surrogatepass")
        (run / "nccl_trace_rank_0").write_bytes(pickle.dumps(doc))
        result = CliRunner().invoke(app, ["analyze", folder, "-f", "json"])
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert result.exit_code == EXIT_OK, result.output
        assert json.loads(result.stdout)["nccl"] is not None
