"""The terminal report opens with the bottom line: its first 25 lines at 100 columns hold the
run's identity, the step time, busy beside MFU, and the top findings with what to try (issue
22; metrics.md §14), each finding's first why and first try whole, wrapped (issue 34).
``--brief`` prints only that."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_RUN, analyze_json

WIDTH, SCREEN = 100, 25


def tracecomm(*args: str) -> str:
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "tracecomm", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    return run.stdout


@pytest.fixture(scope="module")
def document() -> dict:
    return analyze_json(SAMPLE_RUN)


@pytest.fixture(scope="module")
def screen() -> list[str]:
    return tracecomm("analyze", str(SAMPLE_RUN)).splitlines()[:SCREEN]


def test_the_first_screen_holds_the_bottom_line(screen: list[str], document: dict) -> None:
    text = "\n".join(screen)
    step = document["throughput"]["step_time_ns"] / 1e6
    assert screen[0].startswith("tracecomm ") and "8 ranks of 8" in screen[0]
    assert f"step time {step:.3f} ms" in text
    assert "GPU busy " in text and "MFU –" in text and "--model-flops-per-step" in text
    parts = document["step_parts"]
    assert f"exposed comm {parts['exposed_comm_pct']:.1f} %" in text
    # every finding of the bottom line is on the screen with its cost and one line to try
    top = document["findings"]
    assert len(top) >= 3
    for i, finding in enumerate(top[:3], 1):
        head = next(line for line in screen if line.startswith(f" {i}. "))
        assert finding["title"] in head
        assert f"{finding['cost_ns'] / 1e6:.3f} ms per step ({finding['cost_pct']:.1f} %)" in head
        after = screen[screen.index(head) + 1 :]
        assert after[0].lstrip().startswith("why: ")
        tried = next(i for i, line in enumerate(after) if line.lstrip().startswith("try: "))
        # the first why and the first try whole, wrapped, never cut (issue 34)
        assert " ".join(" ".join(after[:tried]).split()) == f"why: {finding['evidence'][0]}"
        end = next(
            (
                i
                for i, line in enumerate(after[tried + 1 :], tried + 1)
                if not line.startswith("     ")
            ),
            len(after),
        )
        if end < len(after):
            assert " ".join(" ".join(after[tried:end]).split()) == f"try: {finding['advice'][0]}"
    assert top[0]["kind"] == "exposed_comm" and top[0]["coll_type"] == "AllGather"
    assert any(f["kind"] == "straggler" and f["ranks"] == [3] for f in top)
    assert all(len(line) <= WIDTH for line in screen)


def test_brief_prints_only_the_bottom_line(screen: list[str]) -> None:
    brief = tracecomm("analyze", str(SAMPLE_RUN), "--brief").splitlines()
    # its evidence whole (issue 34) takes it past one 25-line screen, not past two
    assert len(brief) <= 2 * SCREEN
    assert all(len(line) <= WIDTH for line in brief)
    assert brief[:SCREEN] == screen[: len(brief)]
    assert not any("Details" in line or line.startswith("Findings") for line in brief)


def test_every_step_time_printed_is_the_runs_or_named(document: dict) -> None:
    """Issue 22: one step time. Any other per-step duration the report prints says what it is
    (a rank's median step window, a replayed step) instead of calling itself the step time."""
    text = tracecomm("analyze", str(SAMPLE_RUN))
    step = f"{document['throughput']['step_time_ns'] / 1e6:.3f} ms"
    for line in text.splitlines():
        if "step time" in line.lower():
            assert step in line or "step time –" in line, line


def test_the_readmes_bottom_line_is_the_real_output() -> None:
    """README's example is the sample's --brief output at 100 columns, as printed today."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## The bottom line first") :]
    block = section[
        section.index("```text\n") + 8 : section.index("```\n", section.index("```text"))
    ]
    brief = tracecomm("analyze", str(SAMPLE_RUN), "--brief")
    assert block.splitlines() == [line.rstrip() for line in brief.splitlines()]


@pytest.mark.parametrize("props", [[{"id": 0, "name": ""}], []])
def test_the_header_names_the_device_or_says_it_is_unknown(tmp_path: Path, props: list) -> None:
    """Issue 34: a vLLM capture trace lists its GPU with an empty name; the header said
    '1 rank of 1 ·  · no ProfilerStep'."""
    from tests.conftest import simple_events, trace_doc, write_trace

    write_trace(
        tmp_path / "rank0.json", trace_doc(simple_events(), world=1, deviceProperties=props)
    )
    first = tracecomm("analyze", str(tmp_path), "--brief").splitlines()[0]
    assert "device unknown (the trace names none)" in first and "·  ·" not in first
    doc = analyze_json(tmp_path)
    assert doc["ranks"][0]["devices"] == []
    named = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
    write_trace(
        tmp_path / "rank0.json", trace_doc(simple_events(), world=1, deviceProperties=named)
    )
    assert "NVIDIA H100 80GB HBM3" in tracecomm("analyze", str(tmp_path), "--brief")
