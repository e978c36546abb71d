"""The HTML report as a file: what it embeds, what it may load, how big it gets, and the
`report` command around it. What it looks like in a browser: test_html_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, SAMPLE_RUN
from tracecomm import analyze
from tracecomm.analysis.report import report_document
from tracecomm.cli import EXIT_IO, EXIT_OK, EXIT_USAGE, app
from tracecomm.errors import UsageError
from tracecomm.render.html import embed_json, render_html
from tracecomm.synth import fsdp_run
from tracecomm.synth.writer import write_run

runner = CliRunner()
SCHEMA = json.loads((REPO / "tracecomm/schema/report.schema.json").read_text())
DATA_BLOCK = re.compile(
    r'<script type="application/json" id="tracecomm-data">(.*?)</script>', re.DOTALL
)


def data_of(page: str) -> Any:
    match = DATA_BLOCK.search(page)
    assert match is not None
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def sample_document() -> dict[str, Any]:
    report = analyze(SAMPLE_RUN, detail=["timeline"])
    return report_document(report)


def test_page_embeds_the_json_document_unchanged(sample_document: dict[str, Any]) -> None:
    page = render_html(sample_document)
    assert data_of(page) == json.loads(json.dumps(sample_document))
    jsonschema.validate(data_of(page), SCHEMA)


def test_trace_text_cannot_end_the_data_block() -> None:
    hostile = "</script><script>alert(1)</script><!-- \u2028 & >"
    page = render_html({"summary": {"ranks_analyzed": 1}, "name": hostile})
    assert "alert(1)</script>" not in page
    assert page.count("</script>") == 2  # the data block's and the code's own
    assert data_of(page)["name"] == hostile
    assert "<" not in embed_json({"name": hostile})


def test_security_policy_admits_only_the_page_script(sample_document: dict[str, Any]) -> None:
    page = render_html(sample_document)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    assert "default-src 'none'" in policy.group(1)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy.group(1)


def test_page_references_nothing_outside_itself(sample_document: dict[str, Any]) -> None:
    page = render_html(sample_document)
    assert not re.search(r"""\b(src|href)\s*=|url\(|@import""", page)
    # the only address is the SVG namespace name, which is never fetched
    assert set(re.findall(r"https?://[^\s\"']+", page)) == {"http://www.w3.org/2000/svg"}


def test_timeline_roles_and_chosen_ranks(tmp_path: Path) -> None:
    write_run(fsdp_run(world_size=8, seed=0, slow_rank=5, slowdown=0.3), tmp_path)
    report = analyze(tmp_path, detail=["timeline"])
    assert report.timeline is not None
    roles = {r.role: r.rank for r in report.timeline.ranks}
    assert set(roles) >= {"fastest", "median", "slowest"}
    assert report.stragglers is not None and report.stragglers.flagged == (5,)
    assert 5 in roles.values()  # as the slowest, or as the straggler when another is slower
    assert roles["fastest"] == report.summary.slowest_first[-1]
    assert roles["median"] == report.summary.median_rank
    assert all(
        r.timeline is not None and r.timeline.step == report.timeline.step
        for r in report.timeline.ranks
    )
    chosen = analyze(tmp_path, detail=["timeline"], timeline_ranks="2,6")
    assert chosen.timeline is not None
    assert [(r.rank, r.role, r.timeline is None) for r in chosen.timeline.ranks] == [
        (2, "chosen", False),
        (6, "chosen", False),
    ]
    with pytest.raises(UsageError, match="rank 99 is not among the analyzed ranks"):
        analyze(tmp_path, detail=["timeline"], timeline_ranks="2,99")


def test_report_of_a_64_rank_run_stays_under_5_mb(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(fsdp_run(world_size=64, seed=1), run)
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.stderr
    size = out.stat().st_size
    assert 0 < size < 5_000_000, size
    doc = data_of(out.read_text())
    assert doc["summary"]["ranks_analyzed"] == 64
    assert {r["role"] for r in doc["timeline"]["ranks"]} >= {"fastest", "median", "slowest"}
    assert f"wrote {out}" in result.stderr


def test_analyze_detail_timeline_is_schema_valid() -> None:
    result = runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json", "--detail", "timeline"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["timeline"]["step"] in doc["summary"]["steps"]
    plain = runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"])
    assert json.loads(plain.stdout)["timeline"] is None


def test_unwritable_output_is_a_one_line_io_error(tmp_path: Path) -> None:
    out = tmp_path / "no-such-folder" / "r.html"
    result = runner.invoke(app, ["report", str(SAMPLE_RUN), "-o", str(out), "-q"])
    assert result.exit_code == EXIT_IO == 74
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "Traceback" not in result.stderr


def test_report_needs_an_output_file() -> None:
    result = runner.invoke(app, ["report", str(SAMPLE_RUN)])
    assert result.exit_code == EXIT_USAGE
    assert "--output" in result.stderr


def test_bad_timeline_ranks_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["report", str(SAMPLE_RUN), "-o", str(tmp_path / "r.html"), "--timeline-ranks", "a"]
    )
    assert result.exit_code == EXIT_USAGE
    assert "--timeline-ranks" in result.stderr
