"""Every bad input gets one clear line naming the file, a documented exit code, no traceback."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import kernel, simple_events, trace_doc, write_trace
from tracecomm.cli import EXIT_NO_INPUT, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["analyze", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stdout, result.stderr


def good_rank(folder: Path, rank: int = 0) -> Path:
    return write_trace(folder / f"rank{rank}.json", trace_doc(simple_events(), rank=rank, world=2))


def test_empty_folder(tmp_path: Path) -> None:
    code, out, err = run(str(tmp_path))
    assert code == EXIT_NO_INPUT and out == ""
    assert err.strip() == (
        f"tracecomm: error: {tmp_path}: no trace files (*.json, *.json.gz, Nsight Systems "
        "*.sqlite / *.nsys-rep) found"
    )


def test_folder_without_traces(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text("NCCL INFO ...")
    code, _, err = run(str(tmp_path))
    assert code == EXIT_NO_INPUT and "no trace files" in err


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path / "nope"))
    assert code == EXIT_USAGE and "nope: no such file or folder" in err


def test_bad_steps_option_is_a_usage_error(tmp_path: Path) -> None:
    good_rank(tmp_path)
    code, _, err = run(str(tmp_path), "--steps", "7:3")
    assert code == EXIT_USAGE and "first step is after the last one" in err


def test_steps_written_with_a_dash_are_a_range() -> None:
    from tracecomm.run.options import parse_steps

    assert parse_steps("5-7") == parse_steps("5:7") == parse_steps(" 5 \u2013 7 ") == (5, 7)
    assert parse_steps("5") == (5, 5)


def test_steps_outside_the_trace_name_the_steps_it_has(tmp_path: Path) -> None:
    # the sample's ranks have steps 0-3 (4 complete) and an incomplete last one
    import shutil

    from tests.conftest import SAMPLE_RUN

    shutil.copytree(SAMPLE_RUN, tmp_path / "run")
    steps = {
        s["step"]
        for s in json.loads(run(str(tmp_path / "run"), "-f", "json")[1])["ranks"][0]["steps"]
    }
    lo, hi = min(steps), max(steps)
    for asked, shown in (
        (f"{hi + 90}:{hi + 91}", f"{hi + 90}:{hi + 91}"),
        (f"{hi + 5}-{hi + 9}", f"{hi + 5}:{hi + 9}"),
    ):
        code, out, err = run(str(tmp_path / "run"), "--steps", asked)
        assert code == EXIT_NO_INPUT and out == ""
        assert err.splitlines() == [
            f"tracecomm: error: --steps {shown}: no step of the trace is in that range; the "
            f"traces have steps {lo}\u2013{hi} ({len(steps)} steps)"
        ]


@pytest.mark.parametrize(
    ("write", "reason"),
    [
        (lambda p: p.write_text("<html>not json</html>"), "not JSON"),
        (lambda p: p.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00junk" * 30), "corrupt gzip"),
        (lambda p: p.write_text('{"traceEvents": [{"ph": "X"},, ]}'), "invalid JSON"),
        (lambda p: p.write_text(""), "empty file"),
    ],
)
def test_one_bad_rank_does_not_lose_the_others(tmp_path: Path, write, reason: str) -> None:
    good_rank(tmp_path, 0)
    bad = tmp_path / "rank1.json"
    write(bad)
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_PARTIAL
    doc = json.loads(out)
    assert [r["rank"] for r in doc["ranks"]] == [0]
    assert doc["missing_ranks"] == [
        {"rank": 1, "path": str(bad), "reason": doc["missing_ranks"][0]["reason"]}
    ]
    assert reason in doc["missing_ranks"][0]["reason"]
    lines = [line for line in err.splitlines() if str(bad) in line]
    assert (
        len(lines) == 1 and reason in lines[0] and lines[0].startswith("tracecomm: error: rank 1")
    )


def test_only_bad_files_means_no_usable_input(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_text("not json at all")
    code, _, err = run(str(tmp_path))
    assert code == EXIT_NO_INPUT
    assert f"{tmp_path / 'rank0.json'}: not JSON" in err


def test_truncated_file_is_salvaged_and_flagged_partial(tmp_path: Path) -> None:
    good_rank(tmp_path, 0)
    text = json.dumps(trace_doc(simple_events(), rank=1, world=2), indent=1)
    write_trace(tmp_path / "rank1.json", text=text[: text.rindex('"ts"')])
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_PARTIAL
    doc = json.loads(out)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][1]["partial"] is True
    assert "truncated" in err and "rank1.json" in err


def test_trace_without_trace_events_is_skipped(tmp_path: Path) -> None:
    good_rank(tmp_path, 0)
    write_trace(tmp_path / "rank0.et.json", {"nodes": [], "schema": "1.0.3"})
    code, out, err = run(str(tmp_path), "--format", "json", "--quiet")
    assert code == EXIT_OK and json.loads(out)["skipped_files"][0]["reason"].startswith("no trace")
    code, _, err = run(str(tmp_path / "rank0.et.json"))
    assert code == EXIT_NO_INPUT and "no traceEvents list: not a Kineto trace" in err


def test_trace_with_no_device_events_says_so(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank0.json", trace_doc([]))
    code, _, err = run(str(tmp_path))
    assert code == EXIT_NO_INPUT and "no device events" in err


def test_negative_and_missing_durations(tmp_path: Path) -> None:
    events = simple_events()
    events[4]["dur"] = -3
    del events[5]["dur"]
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_PARTIAL
    assert "1 events with a negative duration were read as 0 µs" in err
    assert "1 events without a duration were read as 0 µs" in err
    assert json.loads(out)["ranks"][0]["partial"] is True


def test_duplicate_ranks_name_both_files(tmp_path: Path) -> None:
    a = good_rank(tmp_path / "a", 0)
    b = good_rank(tmp_path / "b", 0)
    good_rank(tmp_path, 1)
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_PARTIAL
    line = next(line for line in err.splitlines() if "claimed by" in line)
    assert str(a) in line and str(b) in line
    assert [r["rank"] for r in json.loads(out)["ranks"]] == [1]


def test_missing_ranks_against_world_size_are_one_warning(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank0.json", trace_doc(simple_events(), rank=0, world=6))
    write_trace(tmp_path / "rank3.json", trace_doc(simple_events(), rank=3, world=6))
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_OK
    assert json.loads(out)["absent_ranks"] == [1, 2, 4, 5]
    assert "4 of 6 ranks (world_size) have no trace file: 1–2, 4–5" in err


def test_rank_from_file_order_warns(tmp_path: Path) -> None:
    write_trace(tmp_path / "a.json", trace_doc(simple_events(), rank=None))
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_OK
    assert json.loads(out)["ranks"][0]["rank_source"] == "file order"
    assert "assumed rank 0 from file order" in err


def test_mixed_jobs_warn(tmp_path: Path) -> None:
    day_us = 86_400 * 10**6
    early = [kernel("gemm", 1_700_000_000 * 10**6 + i * 10, 5, None) for i in range(2)]
    late = [kernel("gemm", 1_700_000_000 * 10**6 + 3 * day_us + i * 10, 5, None) for i in range(2)]
    write_trace(tmp_path / "rank0.json", trace_doc(early, rank=0, world=2))
    write_trace(tmp_path / "rank1.json", trace_doc(late, rank=1, world=4))
    code, _, err = run(str(tmp_path))
    assert code == EXIT_OK
    assert "72.0 h apart" in err and "disagree on world_size" in err


def test_the_input_folder_is_never_written(tmp_path: Path) -> None:
    good_rank(tmp_path, 0)
    (tmp_path / "bad.json").write_text("nope")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    for fmt in ("terminal", "json", "csv"):
        run(str(tmp_path), "--format", fmt)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


def _bad_rank_texts() -> dict[str, bytes]:
    base = trace_doc(simple_events(), rank=1, world=2)

    def with_event(**changes: object) -> bytes:
        doc = json.loads(json.dumps(base))
        doc["traceEvents"][4].update(changes)
        return json.dumps(doc).encode()

    return {
        "unhashable category": with_event(cat=["kernel"]),
        "invalid UTF-8 in a name": with_event(name="gemm_NAME").replace(b"NAME", b"\xff\xfe"),
        "non-numeric timestamp": with_event(ts="abc.xyz"),
        "overflowing duration": with_event(dur=1e400).replace(b"Infinity", b"1e400"),
        "timestamp beyond int64 ns": with_event(ts=10**17),
        "args as a list": with_event(args=[1, 2]),
    }


@pytest.mark.parametrize("case", sorted(_bad_rank_texts()))
def test_odd_values_in_one_rank_never_crash_the_run(tmp_path: Path, case: str) -> None:
    good_rank(tmp_path, 0)
    (tmp_path / "rank1.json").write_bytes(_bad_rank_texts()[case])
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code in (EXIT_OK, EXIT_PARTIAL), err
    doc = json.loads(out)
    assert 0 in [r["rank"] for r in doc["ranks"]]
    rank0 = next(r for r in doc["ranks"] if r["rank"] == 0)
    assert rank0["window"]["figures"]["compute_ns"] == 150_000
    if code == EXIT_PARTIAL:
        assert "rank1.json" in err


def test_invalid_utf8_is_replaced_and_the_rank_kept(tmp_path: Path) -> None:
    (tmp_path / "rank1.json").write_bytes(_bad_rank_texts()["invalid UTF-8 in a name"])
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_OK and "invalid UTF-8 bytes" in err
    assert json.loads(out)["ranks"][0]["window"]["figures"]["compute_ns"] == 150_000


def test_timestamps_beyond_int64_are_dropped_with_a_warning(tmp_path: Path) -> None:
    good_rank(tmp_path, 0)
    (tmp_path / "rank1.json").write_bytes(_bad_rank_texts()["timestamp beyond int64 ns"])
    code, out, err = run(str(tmp_path), "--format", "json")
    assert code == EXIT_PARTIAL and "1 events without a timestamp were dropped" in err
    rank1 = json.loads(out)["ranks"][1]
    # its dropped kernel leaves step 1 incomplete: said so, not silently analyzed
    assert rank1["partial"] is True and rank1["window"] is None
    assert rank1["steps"][0]["incomplete_reason"] == "1 launched kernels missing from the trace"


def test_bom_and_bare_array_traces_are_read(tmp_path: Path) -> None:
    text = json.dumps(trace_doc(simple_events(), rank=0, world=1))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "rank0.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    code, out, _ = run(str(tmp_path / "a"), "--format", "json")
    assert code == EXIT_OK
    assert json.loads(out)["ranks"][0]["window"]["figures"]["compute_ns"] == 150_000
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "rank0.json").write_text(json.dumps(simple_events()))
    code, out, _ = run(str(tmp_path / "b"), "--format", "json")
    assert code == EXIT_OK
    assert json.loads(out)["ranks"][0]["window"]["figures"]["comm_ns"] == 100_000


def test_negative_rank_falls_back_to_the_file_name(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank5.json", trace_doc(simple_events(), rank=-1, world=None))
    code, out, _ = run(str(tmp_path), "--format", "json")
    assert code == EXIT_OK
    rank = json.loads(out)["ranks"][0]
    assert (rank["rank"], rank["rank_source"]) == (5, "file name")


def test_quoted_correlation_ids_still_link(tmp_path: Path) -> None:
    events = simple_events()
    for ev in events:
        if "correlation" in ev.get("args", {}):
            ev["args"]["correlation"] = str(ev["args"]["correlation"])
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    code, out, _ = run(str(tmp_path), "--format", "json")
    rank = json.loads(out)["ranks"][0]
    assert code == EXIT_OK and rank["unlinked_events"] == 0
    assert rank["steps"][0]["included"] is True


def test_no_complete_step_is_no_usable_input_unless_all_steps(tmp_path: Path) -> None:
    events = [*simple_events(), kernel_launch_without_kernel()]
    write_trace(tmp_path / "rank0.json", trace_doc(events, world=1))
    code, _, err = run(str(tmp_path))
    assert code == EXIT_NO_INPUT and "no complete step" in err and "--all-steps" in err
    code, out, _ = run(str(tmp_path), "--all-steps", "--format", "json")
    assert code == EXIT_OK
    assert json.loads(out)["ranks"][0]["window"]["figures"]["window_ns"] == 250_000


def kernel_launch_without_kernel() -> dict:
    from tests.conftest import launch

    return launch(999, 99)


def test_user_comm_patterns_are_case_sensitive_and_checked(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank0.json", trace_doc(simple_events(), world=1))
    code, _, err = run(str(tmp_path), "--comm-pattern", "gemm(?=x)")
    assert code == EXIT_USAGE and "look-around" in err
    code, out, _ = run(str(tmp_path), "--comm-pattern", "SM90_GEMM", "--format", "json")
    assert json.loads(out)["ranks"][0]["comm_kernels"] == 1  # no match: case matters
    code, out, _ = run(str(tmp_path), "--comm-pattern", "sm90_gemm", "--format", "json")
    assert json.loads(out)["ranks"][0]["comm_kernels"] == 2


def test_two_copies_of_the_only_rank_is_no_usable_input(tmp_path: Path) -> None:
    good_rank(tmp_path / "a", 0)
    good_rank(tmp_path / "b", 0)
    code, _, err = run(str(tmp_path))
    assert code == EXIT_NO_INPUT and "claimed by 2 files" in err
