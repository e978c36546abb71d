"""Property-based hostile input (hypothesis, derandomized: the same cases in every CI run): every
entry point fed generated and mutated traces, settings files, baselines and cache entries.

Per case: an exit code from the documented set (never 70), no traceback, bounded time, nothing
written outside the requested output, and no impossible figure in a JSON document. CI runs a
few dozen cases per property; ``pytest tests/hostile --hostile-examples 2000`` runs long.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import simple_events, trace_doc
from tests.hostile.conftest import examples, invoke

PROPERTY = settings(
    derandomize=True,
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

NASTY_TEXT = st.sampled_from(
    [
        "\x1b]0;x\x07",
        "\x1b[2J",
        "a\r\nb",
        "[bold]x[/]",
        "\u202eevil",
        "",
        " ",
        "ncclDevKernel_AllReduce_Sum_f32",
        "ProfilerStep#3",
        "x" * 5000,
        "=cmd()",
        "%0A::error::",
    ]
)
NASTY_VALUE: st.SearchStrategy[Any] = st.one_of(
    NASTY_TEXT,
    st.sampled_from([None, True, -1, 0, 2**63, -(2**70), 1e308, -1e308, 0.5, [], {}, [1, 2]]),
    st.integers(min_value=-(10**12), max_value=10**12),
)
FIELDS = ("ts", "dur", "name", "cat", "ph", "pid", "tid", "args")
ARG_FIELDS = ("correlation", "device", "stream", "Collective name", "Seq", "Group size")


def _mutate(doc: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    events = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 6), label="mutations")):
        event = events[data.draw(st.integers(0, len(events) - 1), label="event")]
        where = data.draw(st.sampled_from(("event", "args", "drop", "meta")), label="where")
        if where == "event":
            event[data.draw(st.sampled_from(FIELDS))] = data.draw(NASTY_VALUE)
        elif where == "args" and isinstance(event.get("args"), dict):
            event["args"][data.draw(st.sampled_from(ARG_FIELDS))] = data.draw(NASTY_VALUE)
        elif where == "drop":
            event.pop(data.draw(st.sampled_from(FIELDS)), None)
        else:
            key = data.draw(
                st.sampled_from(("distributedInfo", "baseTimeNanoseconds", "host_name"))
            )
            doc[key] = data.draw(NASTY_VALUE)
    return doc


def _write_run(folder: Path, data: st.DataObject) -> Path:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for rank in (0, 1):
        doc = _mutate(trace_doc(simple_events(1000 + 7 * rank), rank=rank, world=2), data)
        raw = json.dumps(doc, allow_nan=True).encode()
        cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))), label="cut")
        if cut is not None:
            raw = raw[:cut]
        if data.draw(st.booleans(), label="gzip"):
            (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(raw, mtime=0))
        else:
            (folder / f"rank{rank}.json").write_bytes(raw)
    return folder


def impossible(doc: Any, key: str = "") -> list[str]:
    """Negative times and shares outside 0–100 anywhere in a JSON document (the offsets and
    deltas of clocks may be negative by definition)."""
    if isinstance(doc, dict):
        return [bad for k, v in doc.items() for bad in impossible(v, k)]
    if isinstance(doc, list):
        return [bad for v in doc for bad in impossible(v, key)]
    if isinstance(doc, bool) or not isinstance(doc, int | float):
        return []
    if isinstance(doc, float) and not math.isfinite(doc):
        return [f"{key}={doc}"]
    signed = key.startswith(("offset", "delta", "clock")) or key in ("start_ns", "end_ns")
    if key.endswith("_ns") and doc < 0 and not signed:
        return [f"{key}={doc}"]
    if key.endswith("_pct") and not -1e-9 <= doc <= 100 + 1e-9:
        return [f"{key}={doc}"]
    return []


@PROPERTY
@given(data=st.data())
def test_mutated_traces_through_every_command(tmp_path: Path, data: st.DataObject) -> None:
    run = _write_run(tmp_path / "run", data)
    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    analyzed = invoke("analyze", run, "-f", "json", "-q", watch=run)
    if analyzed.code in (0, 4):
        assert not impossible(json.loads(analyzed.stdout)), impossible(json.loads(analyzed.stdout))
    invoke("analyze", run, "-q", watch=run)
    invoke("analyze", run, "-f", "csv", "-q", "--detail", "timeline", "--project", watch=run)
    invoke("report", run, "-o", out / "r.html", "-q", watch=run)
    invoke("baseline", run, "-o", out / "b.json", "-q", watch=run)
    if (out / "b.json").exists():
        invoke("check", run, "-b", out / "b.json", "-f", "github", watch=run)
    ingested = invoke("ingest", run, "-o", out / "sum", "-q", watch=run)
    if ingested.code in (0, 4):
        invoke("analyze", out / "sum", "-f", "json", "-q", watch=run)
    invoke("nccl", run, watch=run)


SETTINGS_KEYS = {
    "model": (
        "config",
        "seq_len",
        "global_batch",
        "flops_per_step",
        "flops-per-token",
        "tokens_per_step",
        "flops_formula",
        "attention",
        "bogus",
    ),
    "device": ("dtype", "peak_tflops", "bogus"),
    "rules": ("comm", "compute", "bogus"),
    "check": ("max_step_time_increase", "min_mfu", "max_idle", "noise_floor", "bogus"),
    "run": ("framework", "world_size", "steps", "layout", "bogus"),
    "run.layout": ("dp", '"a b"', "bogus"),
}
TOML_VALUES = st.sampled_from(
    [
        '"x"',
        "1",
        "-1",
        "0",
        "1.5",
        "nan",
        "inf",
        "-inf",
        "true",
        "[]",
        '["a=NotAType"]',
        '["(unclosed"]',
        '{ step_time = "1ms" }',
        '"5%"',
        '"12ms"',
        "1e400",
        '"bf16"',
        '"\\u001b[2J"',
        '"megatron"',
        "[1, 3]",
        "[3, 1]",
        "9223372036854775807",
        "{ dp = 2 }",
    ]
)


@PROPERTY
@given(data=st.data())
def test_generated_settings_files(tmp_path: Path, data: st.DataObject) -> None:
    run = tmp_path / "run"
    if not run.exists():
        run.mkdir()
        for rank in (0, 1):
            doc = trace_doc(simple_events(1000 + 7 * rank), rank=rank, world=2)
            (run / f"rank{rank}.json").write_text(json.dumps(doc))
    lines = []
    for table in data.draw(st.lists(st.sampled_from(sorted(SETTINGS_KEYS)), max_size=3)):
        lines.append(f"[{table}]")
        for key in data.draw(st.lists(st.sampled_from(SETTINGS_KEYS[table]), max_size=3)):
            lines.append(f"{key} = {data.draw(TOML_VALUES)}")
    if data.draw(st.booleans()):
        lines.insert(0, data.draw(st.sampled_from(['check = "strict"', "model = 5", "[[model]]"])))
    (run / "tracecomm.toml").write_text("\n".join(lines) + "\n")
    for command in (("analyze", run, "-f", "json"), ("check", run, "-b", run)):
        result = invoke(*command)
        # [run] steps is the default --steps: naming no step of the traces is exit 3
        ranged = result.code == 3 and "[run] steps" in result.stderr
        assert result.code in (0, 1, 2) or ranged, (lines, result.stderr)
        if result.code == 2:
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@PROPERTY
@given(data=st.data())
def test_mutated_baselines(tmp_path: Path, data: st.DataObject) -> None:
    run = tmp_path / "run"
    base = tmp_path / "base.json"
    if not base.exists():
        run.mkdir(exist_ok=True)
        for rank in (0, 1):
            doc = trace_doc(simple_events(1000 + 7 * rank), rank=rank, world=2)
            (run / f"rank{rank}.json").write_text(json.dumps(doc))
        assert invoke("baseline", run, "-o", base).code == 0
    doc = json.loads(base.read_text())
    target = data.draw(st.sampled_from(("top", "rank", "types")))
    if target == "top":
        doc[data.draw(st.sampled_from(sorted(doc)))] = data.draw(NASTY_VALUE)
    elif target == "rank":
        rank = doc["ranks"][0]
        rank[data.draw(st.sampled_from(sorted(rank)))] = data.draw(NASTY_VALUE)
    else:
        doc["ranks"][0]["exposed_by_type_ns"] = {data.draw(NASTY_TEXT): data.draw(NASTY_VALUE)}
    mutated = tmp_path / "mutated.json"
    mutated.write_text(json.dumps(doc))
    result = invoke("check", run, "-b", mutated, "-f", "json")
    assert result.code in (0, 1, 2), result.stderr


@PROPERTY
@given(data=st.data())
def test_damaged_cache_entries(tmp_path: Path, data: st.DataObject) -> None:
    run = tmp_path / "run"
    cache = tmp_path / "cache"
    if not run.exists():
        run.mkdir()
        for rank in (0, 1):
            doc = trace_doc(simple_events(1000 + 7 * rank), rank=rank, world=2)
            (run / f"rank{rank}.json").write_text(json.dumps(doc))
    clean = invoke("analyze", run, "-f", "json", "-q")
    shutil.rmtree(cache, ignore_errors=True)  # the same fresh entries in every case
    invoke("analyze", run, "-f", "json", "-q", "--cache", cache)
    shutil.rmtree(cache / "memo", ignore_errors=True)  # the entries are what is damaged here
    files = sorted(p for p in cache.rglob("*") if p.is_file())
    damage = st.tuples(
        st.integers(0, 10**6),
        st.sampled_from(("flip", "cut", "empty", "json")),
        st.lists(st.integers(0, 10**9), min_size=1, max_size=8),
        NASTY_VALUE,
    )
    for pick, how, spots, value in data.draw(st.lists(damage, min_size=1, max_size=4)):
        path = files[pick % len(files)]
        raw = bytearray(path.read_bytes())
        if how == "flip" and raw:
            for spot in spots:
                raw[spot % len(raw)] ^= 0xFF
        elif how == "cut":
            raw = raw[: spots[0] % (len(raw) + 1)]
        elif how == "empty":
            raw = bytearray()
        else:
            raw = bytearray(json.dumps({"format": 3, "meta": value}).encode())
        path.write_bytes(bytes(raw))
    result = invoke("analyze", run, "-f", "json", "-q", "--cache", cache)
    assert result.code == 0
    got, want = json.loads(result.stdout)["ranks"], json.loads(clean.stdout)["ranks"]
    assert got == want, (
        [r["rank"] for r in got],
        [r["rank"] for r in want],
        result.stderr[-400:],
        clean.stderr[-400:],
        [k for k in want[0] if k in got[0] and got[0][k] != want[0][k]] if got and want else None,
    )
