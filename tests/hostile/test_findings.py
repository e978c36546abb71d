"""Issue 18's findings, each as a test: tried as an attacker would, on traces, caches, settings
files and baselines. (The Flight Recorder ones: tests/nccl/test_hostile.py; HTA failing inside
crosscheck: tests/conformance/test_hta_compat.py::test_crosscheck_on_every_shared_run.)"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import kernel, launch, simple_events, step, trace_doc, write_trace
from tests.hostile.conftest import invoke
from tracecomm.synth import fsdp_run, write_run

# Every control character but the line feed (the formats' own line breaks).
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    write_run(fsdp_run(world_size=4, steps=3, seed=6), folder)
    return folder


def analyze_json(run: Path, *extra: str) -> dict[str, Any]:
    out = invoke("analyze", run, "-f", "json", "-q", "-j", "1", *extra)
    assert out.code == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


# --- code execution from the cache ------------------------------------------------------------


class _Payload:
    """Unpickling this runs code: it writes the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_a_cache_of_pickles_runs_no_code_and_gives_the_right_report(
    run: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = analyze_json(run, "--cache", str(cache))
    marker = tmp_path / "payload-ran"
    poison = pickle.dumps(_Payload(marker))
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files
    for path in files:
        path.write_bytes(poison)  # every file: entries, results and the memo
    out = invoke("analyze", run, "-f", "json", "-j", "1", "--cache", cache)
    assert out.code == 0 and not marker.exists()
    again = json.loads(out.stdout)
    assert again["ranks"] == first["ranks"] and again["stragglers"] == first["stragglers"]
    cache_lines = [line for line in out.stderr.splitlines() if "--cache" in line]
    assert len(cache_lines) == 1 and "warning" in cache_lines[0], out.stderr
    # the entries were replaced: a third run is served from the cache, silently
    third = invoke("analyze", run, "-f", "json", "-j", "1", "--cache", cache)
    assert "--cache" not in third.stderr and json.loads(third.stdout)["ranks"] == first["ranks"]


def test_no_module_reads_pickle_but_the_flight_recorder_reader() -> None:
    package = Path(__file__).resolve().parents[2] / "tracecomm"
    users = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if re.search(r"\bpickle\.(loads?|Unpickler)\b|^import pickle", p.read_text(), re.M)
    )
    assert users == ["nccl/flight.py"]


# --- terminal escape injection ----------------------------------------------------------------

HOSTILE = "\x1b]0;pwned\x07node\x1b[2J\x1b[31m\r\n::error::x\u202e"


def _hostile_run(folder: Path) -> Path:
    events = simple_events()
    events[4] = kernel("gemm\x1b[2J\x07" + HOSTILE, 1000, 100, 1)
    for rank in (0, 1):
        write_trace(
            folder / f"rank{rank}.json",
            trace_doc(events, rank=rank, world=2, host_name=f"{HOSTILE}{rank}"),
        )
    (folder / "rank2\x1b[2J\n.json").write_text("{not json")
    return folder


def test_no_raw_control_character_reaches_any_output(tmp_path: Path) -> None:
    run = _hostile_run(tmp_path / "run")
    base = tmp_path / "base.json"
    outputs = [
        invoke("analyze", run),
        invoke("analyze", run, "-f", "csv"),
        invoke("analyze", run, "-f", "json"),
        invoke("baseline", run, "-o", base),
    ]
    outputs += [
        invoke("check", run, "-b", base, "-f", fmt)
        for fmt in ("terminal", "github", "junit", "markdown", "json")
    ]
    for out in outputs:
        assert out.code in (0, 1, 4), out.stderr
        for text in (out.stdout, out.stderr):
            assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))
            assert "\u202e" not in text
    errors = [line for line in outputs[0].stderr.splitlines() if "rank2" in line]
    assert len(errors) == 1 and errors[0].startswith("tracecomm: ")  # one line, not two
    assert "\\x1b" in outputs[0].stdout  # the names are there, escaped visibly


def test_a_name_with_brackets_is_text_not_markup(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_trace(tmp_path / f"rank{rank}.json", trace_doc(simple_events(), rank=rank))
    (tmp_path / "[red]r[_].json").write_text("{")
    out = invoke("analyze", tmp_path)
    flat = re.sub(r"[\s│]", "", out.stdout)  # the table may fold a long path
    assert out.code == 4 and "[red]r[_].json" in flat


# --- unbounded work ---------------------------------------------------------------------------


def _gzip_of_spaces(path: Path, size: int, head: bytes = b"", tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (64 << 20)
    with path.open("wb") as out:
        out.write(deflate.compress(head))
        for _ in range(size // len(block)):
            out.write(deflate.compress(block))
        out.write(deflate.compress(tail) + deflate.flush())
    return path


# The child reports its own peak (VmHWM counts from exec: ru_maxrss would include the pages of
# the large test process it was forked from).
_PEAK = (
    "import atexit, re, sys\n"
    "def peak():\n"
    "    text = open('/proc/self/status').read()\n"
    "    sys.stderr.write('PEAK ' + re.search(r'VmHWM:\\s+(\\d+)', text).group(1) + '\\n')\n"
    "atexit.register(peak)\n"
    "from tracecomm.cli import main\n"
    "sys.argv = ['tracecomm', *sys.argv[1:]]\n"
    "main()\n"
)


def _measured(*args: str | Path) -> tuple[int, str, float, int]:
    """(exit code, stderr, seconds, peak RSS in MiB) of the CLI in a fresh process."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    err, _, peak = proc.stderr.rpartition("PEAK ")
    return proc.returncode, err, seconds, int(peak) // 1024


@pytest.fixture(scope="module")
def whitespace_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 GiB of whitespace inside a trace's array, in a 2 MB .json.gz."""
    folder = tmp_path_factory.mktemp("bomb")
    _gzip_of_spaces(folder / "rank0.json.gz", 2 << 30, b'{"traceEvents": [', b"]}")
    return folder


def test_a_gzip_bomb_is_refused_early_in_little_memory(whitespace_bomb: Path) -> None:
    """Refused once the inflated bytes pass the bound, not after inflating the 2 GiB: the
    message says where it stopped (no timed assertion: bench/ measures speed)."""
    code, err, seconds, rss = _measured("analyze", whitespace_bomb, "-f", "json")
    assert code == 3 and rss < 300, (code, seconds, rss, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "rank0.json.gz" in lines[0] and "--max-inflate-ratio" in lines[0]
    stopped = re.search(r"\(([\d.]+) MiB\)", lines[0])
    assert stopped is not None and float(stopped.group(1)) < 512, lines[0]


def test_a_raised_bound_lets_an_inflating_file_through(tmp_path: Path) -> None:
    folder = tmp_path / "bomb"
    _gzip_of_spaces(folder / "rank0.json.gz", 512 << 20, b'{"traceEvents": [', b"]}")
    refused = invoke("analyze", folder)
    assert refused.code == 3 and "--max-inflate-ratio" in refused.stderr
    through = invoke("analyze", folder, "--max-inflate-ratio", "5000")
    assert through.code == 3 and "inflate" not in through.stderr  # read: it holds no events
    assert "no device events" in through.stderr


def test_a_huge_kernel_name_is_refused_in_little_memory(tmp_path: Path) -> None:
    events = simple_events()
    text = json.dumps(trace_doc(events)).replace("sm90_gemm", "g" * (80 << 20))
    (tmp_path / "rank0.json").write_text(text)
    code, err, seconds, rss = _measured("analyze", tmp_path, "-f", "json")
    assert code == 3 and rss < 600, (code, seconds, rss, err)
    assert "--max-event-size" in err and len(err.strip().splitlines()) == 1


# --- exit 70 on input errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ('[device]\npeak_tflops = "fast"\n', "peak_tflops"),
        ("[device]\npeak_tflops = inf\n", "peak_tflops"),
        ('check = "strict"\n', "[check]"),
        ("check = 5\n", "[check]"),
        ('[model]\nseq_len = true\nglobal_batch = 1\nconfig = "c.json"\n', "seq_len"),
        ("[check]\nmax_step_time_increase = nan\n", "max_step_time_increase"),
        ("[modle]\nseq_len = 4\n", "modle"),
    ],
)
def test_a_bad_settings_file_is_a_usage_error_naming_the_key(
    run: Path, settings: str, key: str
) -> None:
    (run / "tracecomm.toml").write_text(settings)
    for command in (("analyze", run, "-f", "json"), ("check", run, "-b", run)):
        out = invoke(*command)
        assert out.code == 2 and key in out.stderr and out.stdout == "", out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_a_full_disk_is_an_io_error_not_a_bug(run: Path) -> None:
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "tracecomm", "analyze", str(run), "-f", "json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert proc.returncode == 74 and "No space left" in proc.stderr
    assert "bug" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# --- a gate that can be switched off ----------------------------------------------------------


def test_a_nan_budget_is_refused(run: Path, tmp_path: Path) -> None:
    slower = tmp_path / "slower"
    write_run(fsdp_run(world_size=4, steps=3, seed=6, slowdown=0.5), slower)
    assert invoke("check", slower, "-b", run).code == 1  # the regression is there
    out = invoke("check", slower, "-b", run, "--max-step-time-increase", "nan")
    assert out.code == 2 and "max_step_time_increase" in out.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [("step_window_ns", -1e30), ("step_window_ns", -1), ("overlap_pct", 250.0), ("idle_ns", "x")],
)
def test_an_impossible_baseline_is_refused(
    run: Path, tmp_path: Path, field: str, value: object
) -> None:
    base = tmp_path / "base.json"
    assert invoke("baseline", run, "-o", base).code == 0
    doc = json.loads(base.read_text())
    doc["ranks"][0][field] = value
    base.write_text(json.dumps(doc))
    out = invoke("check", run, "-b", base)
    assert out.code == 2 and field in out.stderr and str(base) in out.stderr


# --- silently ignored -------------------------------------------------------------------------


def test_an_unknown_collective_type_in_a_rule_is_refused(run: Path) -> None:
    out = invoke("analyze", run, "--comm-pattern", "xmma=NotAType")
    assert out.code == 2 and "NotAType" in out.stderr and "--comm-pattern" in out.stderr


def test_a_cache_that_cannot_be_a_cache_is_refused(run: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for cache in (a_file, Path("/sys/tracecomm-cache")):
        out = invoke("analyze", run, "--cache", cache)
        assert out.code == 2 and "--cache" in out.stderr


def test_a_timeline_rank_that_is_not_there_is_refused(run: Path) -> None:
    out = invoke("analyze", run, "--detail", "timeline", "--timeline-ranks", "99", "-f", "json")
    assert out.code == 2 and "99" in out.stderr and "--timeline-ranks" in out.stderr


def test_launches_without_device_events_are_said(tmp_path: Path) -> None:
    events = [step(1, 0, 10_000)] + [launch(10 + i, i) for i in range(840)]
    events += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 100,
            "tid": 100,
            "ts": 5 + i,
            "dur": 1,
            "args": {},
        }
        for i in range(3)
    ]
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    doc = json.loads(invoke("analyze", tmp_path, "-f", "json").stdout)
    notes = " ".join(n["text"] for n in doc["notes"])
    assert doc["ranks"][0]["timeline"] == "cpu"
    assert "840 kernel launches" in notes and "no GPU event" in notes


def test_the_input_folder_is_never_written(run: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in run.iterdir())
    invoke("analyze", run, "--cache", tmp_path / "cache", watch=run)
    invoke("report", run, "-o", tmp_path / "r.html", watch=run)
    invoke("ingest", run, "-o", tmp_path / "sum", watch=run)
    out = invoke("ingest", run, "-o", run / "inside", watch=run)
    assert out.code == 2 and sorted(p.name for p in run.iterdir()) == before


def test_a_copied_run_folder_with_a_symlinked_cache_is_not_followed(
    run: Path, tmp_path: Path
) -> None:
    """A shared cache folder whose entry is a link elsewhere: the link is replaced, the place it
    pointed to is left alone."""
    cache = tmp_path / "cache"
    analyze_json(run, "--cache", str(cache))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    for entry in [p for p in cache.iterdir() if p.is_dir() and p.name != "memo"]:
        shutil.rmtree(entry)
        entry.symlink_to(victim, target_is_directory=True)
    shutil.rmtree(cache / "memo", ignore_errors=True)
    analyze_json(run, "--cache", str(cache))
    assert (victim / "keep.txt").read_text() == "mine" and sorted(os.listdir(victim)) == [
        "keep.txt"
    ]
