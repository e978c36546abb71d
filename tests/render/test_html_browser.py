"""The HTML report in a real headless Chromium: it loads offline with no console error, every
section renders from the data, trace text stays text, and the sample run's screenshot is kept
as a test artifact (test-artifacts/report-sample-run.png)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO, SAMPLE_RUN
from tests.render.browser import Page, chromium_or_skip, chromium_page
from tracecomm.cli import EXIT_OK, app
from tracecomm.synth import fsdp_run
from tracecomm.synth.writer import write_run

runner = CliRunner()
ARTIFACTS = REPO / "test-artifacts"
READY = "document.getElementById('report').dataset.ready === 'true'"
SECTIONS = ["headline", "ranks", "stragglers", "timeline", "bandwidth", "scaling"]


def report_of(run: Path, out: Path, *extra: str) -> Path:
    result = runner.invoke(app, ["report", str(run), "-o", str(out), "-q", *extra])
    assert result.exit_code == EXIT_OK, result.stderr
    return out


def open_report(page: Page, path: Path) -> list[str]:
    load = page.open(path.resolve().as_uri(), READY)
    assert load.network_requests == [path.resolve().as_uri()]  # nothing else is fetched
    return load.console_errors


def count(page: Page, selector: str) -> int:
    return int(page.evaluate(f"document.querySelectorAll({json.dumps(selector)}).length"))


@pytest.fixture(scope="module")
def browser() -> str:
    return chromium_or_skip()


def test_sample_run_report_renders_every_section(browser: str, tmp_path: Path) -> None:
    html = report_of(SAMPLE_RUN, tmp_path / "sample.html")
    doc = json.loads(
        runner.invoke(
            app, ["analyze", str(SAMPLE_RUN), "-f", "json", "--detail", "timeline"]
        ).stdout
    )
    with chromium_page() as page:
        assert open_report(page, html) == []
        assert page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)") == (
            SECTIONS
        )
        assert page.evaluate("document.querySelectorAll('section[data-empty]').length") == 0
        # 1. headline: the step time, the step's shares and the findings, as in the JSON
        cards = page.evaluate(
            "[...document.querySelectorAll('.card .value')].map(e => e.textContent)"
        )
        assert cards[0] == f"{doc['throughput']['step_time_ns'] / 1e6:.2f} ms"
        assert cards[3] == f"{doc['step_parts']['busy_pct']:.1f} %"
        assert cards[4] == f"{doc['step_parts']['exposed_comm_pct']:.1f} %"
        assert cards[-1] == doc["findings"][0]["title"]
        kinds = page.evaluate(
            "[...document.querySelectorAll('#headline li.finding')].map(e => e.dataset.kind)"
        )
        assert kinds == [f["kind"] for f in doc["findings"]] and "straggler" in kinds
        # the sample's slow rank costs 4 % of the step, under §6's flag line: a finding all
        # the same (over 2 %), not a flagged straggler
        assert doc["stragglers"]["flagged"] == []
        # the profiler's artefacts are notes, never findings
        notes = page.evaluate(
            "[...document.querySelectorAll('#headline ul.diagnostics li')].map(e => e.textContent)"
        )
        assert any("unlinked" in n for n in notes)
        assert not any("unlinked" in t for f in doc["findings"] for t in f["evidence"])
        # 2. one bar row per rank, under its host
        assert count(page, "#ranks .rank-row") == len(doc["ranks"])
        assert page.evaluate(
            "[...document.querySelectorAll('#ranks .host text')].map(e => e.textContent)"
        ) == ["node0"]
        # 3. ranks x steps cells shaded by root delay, the hottest on the first-ranked rank
        steps = doc["summary"]["steps"]
        assert count(page, "#stragglers rect.cell") == len(doc["ranks"]) * len(steps)
        worst = max(doc["stragglers"]["delay_by_step"], key=lambda c: c["root_delay_ns"])
        assert worst["rank"] == doc["stragglers"]["ranks"][0]["rank"] == 3
        cell = f"#stragglers rect.cell[data-rank='{worst['rank']}'][data-step='{worst['step']}']"
        assert page.evaluate(
            f"document.querySelector({json.dumps(cell)}).getAttribute('fill')"
        ) == (
            "rgb(214,39,40)"  # the top of the scale
        )
        # 4. one timeline per chosen rank, lanes and exposed spans from the JSON
        timelines = doc["timeline"]["ranks"]
        assert count(page, "#timeline svg.timeline") == len(timelines)
        assert count(page, "#timeline rect.segment") == sum(
            len(lane["segments"]) for r in timelines for lane in r["timeline"]["lanes"]
        )
        assert count(page, "#timeline rect.exposed") == sum(
            len(r["timeline"]["exposed"]) for r in timelines
        )
        # 5. one point per bandwidth row; 6. one bar row per collective type
        assert count(page, "#bandwidth circle.point") == len(doc["bandwidth"]["rows"])
        assert count(page, "#scaling g.type-row") == len(doc["by_type"])
        ARTIFACTS.mkdir(exist_ok=True)
        shot = page.screenshot(ARTIFACTS / "report-sample-run.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000


def test_sorting_by_exposed_comm_reorders_the_bars(browser: str, tmp_path: Path) -> None:
    html = report_of(SAMPLE_RUN, tmp_path / "sample.html")
    doc = json.loads(runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"]).stdout)
    by_exposed = sorted(
        doc["ranks"],
        key=lambda r: (-r["window"]["figures"]["exposed_comm_ns"] / r["steps_included"], r["rank"]),
    )
    order = "[...document.querySelectorAll('#ranks .rank-row')].map(g => +g.dataset.rank)"
    with chromium_page() as page:
        assert open_report(page, html) == []
        assert page.evaluate(order) == sorted(r["rank"] for r in doc["ranks"])
        page.evaluate(
            "const s = document.getElementById('rank-sort'); s.value = 'exposed';"
            "s.dispatchEvent(new Event('change'))"
        )
        assert page.evaluate(order) == [r["rank"] for r in by_exposed]


def test_trace_text_renders_as_text_never_as_markup(browser: str, tmp_path: Path) -> None:
    """A kernel and a host named with markup: shown verbatim, nothing runs."""
    kernel_payload = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">'
    host_payload = "<b>node</b><svg onload=window.__pwned=3>"
    run = tmp_path / "run"
    for path in write_run(fsdp_run(world_size=2, seed=0, gzip=False), run):
        text = path.read_text()
        names = {e["name"] for e in json.loads(text)["traceEvents"] if e.get("cat") == "kernel"}
        gemm = next(n for n in sorted(names) if "gemm" in n)
        text = text.replace(json.dumps(gemm), json.dumps(kernel_payload))
        text = text.replace('"host_name": "node0"', f'"host_name": {json.dumps(host_payload)}')
        path.with_suffix(".json.gz").write_bytes(gzip.compress(text.encode()))
        path.unlink()
    html = report_of(run, tmp_path / "xss.html", "--timeline-ranks", "0,1")
    with chromium_page() as page:
        assert open_report(page, html) == []
        assert page.evaluate("window.__pwned === undefined")
        assert page.evaluate("document.querySelectorAll('main script, main img, b').length") == 0
        body = page.evaluate("document.body.textContent")
        assert kernel_payload in body and host_payload in body


def test_a_single_rank_says_why_sections_are_empty(browser: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    paths = write_run(fsdp_run(world_size=2, seed=0), run)
    paths[1].unlink()
    html = tmp_path / "one.html"
    result = runner.invoke(app, ["report", str(run), "-o", str(html), "-q"])
    assert result.exit_code in (EXIT_OK, 4), result.stderr  # 4: world_size says 2 ranks
    with chromium_page() as page:
        assert open_report(page, html) == []
        assert page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)") == (
            SECTIONS
        )
        empty = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('section[data-empty]')]"
            ".map(s => [s.id, s.querySelector('.empty').textContent]))"
        )
        assert set(empty) == {"stragglers", "bandwidth"}
        assert "two or more ranks" in empty["stragglers"]
        assert "message sizes" in empty["bandwidth"]


def test_an_impossible_mfu_is_shown_as_impossible(browser: str, tmp_path: Path) -> None:
    html = report_of(SAMPLE_RUN, tmp_path / "mfu.html", "--model-flops-per-step", "2e15")
    with chromium_page() as page:
        assert open_report(page, html) == []
        card = page.evaluate(
            "[...document.querySelectorAll('.card')].find(c => "
            "c.querySelector('.label').textContent === 'MFU').textContent"
        )
        assert "–" in card and "impossible: 1270.1 %" in card


def test_mfu_tokens_and_the_link_line_when_given(browser: str, tmp_path: Path) -> None:
    flags = ["--model-flops-per-step", "6.3e13", "--tokens-per-step", "32768", "--link-gbps", "900"]
    html = report_of(SAMPLE_RUN, tmp_path / "mfu.html", *flags)
    doc = json.loads(runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json", *flags]).stdout)
    tp = doc["throughput"]
    with chromium_page() as page:
        assert open_report(page, html) == []
        cards = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('.card')].map(c => "
            "[c.querySelector('.label').textContent, c.querySelector('.value').textContent]))"
        )
        assert tp["mfu_possible"] and cards["MFU"] == f"{tp['mfu'] * 100:.1f} %"
        assert cards["Tokens / s"] == f"{round(tp['tokens_per_s']):,}"
        assert count(page, "#bandwidth line.link") == 1
        label = page.evaluate("document.querySelector('#bandwidth svg').textContent")
        assert "link 900 Gbit/s" in label


def test_projection_table_when_asked(browser: str, tmp_path: Path) -> None:
    from tracecomm.synth.scaling import Network, scaling_run

    run = tmp_path / "run"
    write_run(scaling_run(16, Network(alpha_us=20.0, bus_gbps=200.0), base_world=16), run)
    html = report_of(run, tmp_path / "p.html", "--project")
    with chromium_page() as page:
        assert open_report(page, html) == []
        worlds = page.evaluate(
            "[...document.querySelectorAll('#projection tr[data-world]')]"
            ".map(r => +r.dataset.world)"
        )
        assert worlds == [16, 8, 32, 64, 128, 256]
        peak = page.evaluate(
            "[...document.querySelectorAll('#projection td')]"
            ".find(td => td.textContent.includes('peak'))?.parentElement.dataset.world"
        )
        turning = page.evaluate(
            "JSON.parse(document.getElementById('tracecomm-data').textContent)"
            ".projection.turning_point"
        )
        assert turning is not None and peak == str(turning)
    plain = report_of(run, tmp_path / "q.html")
    with chromium_page() as page:
        assert open_report(page, plain) == []
        assert "--project" in page.evaluate(
            "document.getElementById('projection-empty').textContent"
        )


def test_pipeline_view_and_idle_causes_of_a_1f1b_run(browser: str, tmp_path: Path) -> None:
    from tracecomm.synth.pp import dp_pp_run

    run = tmp_path / "run"
    write_run(dp_pp_run(dp=1, pp=4, microbatches=8, steps=2), run)
    html = report_of(run, tmp_path / "pp.html")
    with chromium_page() as page:
        assert open_report(page, html) == []
        stages = page.evaluate(
            "[...document.querySelectorAll('table.pipeline tr[data-stage]')].length"
        )
        assert stages == 4
        causes = page.evaluate(
            "[...document.querySelectorAll('#idle-causes tr[data-cause]')]"
            ".map(r => r.dataset.cause)"
        )
        assert "pipeline_drain" in causes


def test_what_to_fix_in_the_report_of_an_overloaded_stage(browser: str, tmp_path: Path) -> None:
    from tracecomm.synth.pp import dp_pp_run

    run = tmp_path / "run"
    write_run(dp_pp_run(dp=2, pp=4, microbatches=4, steps=2, layers_per_stage=(2, 2, 2, 4)), run)
    html = report_of(run, tmp_path / "fix.html")
    with chromium_page() as page:
        assert open_report(page, html) == []
        cards = page.evaluate(
            "[...document.querySelectorAll('.card')].map(c => [...c.children]"
            ".map(e => e.textContent))"
        )
        assert cards[-1][0] == "Costs the most" and cards[-1][1].startswith("pipeline stage 3 ")
        rows = page.evaluate(
            "[...document.querySelectorAll('#what-to-fix tr[data-kind]')]"
            ".map(r => [r.dataset.kind, r.dataset.index, r.className])"
        )
        assert rows[0] == ["stage", "3", "flagged"]
        top = page.evaluate(
            "[...document.querySelectorAll('#headline li.finding')].map(e => e.textContent)"
        )[0]
        assert "ranks 6, 7" in top and "stage 3" in top and "dependency replay" in top


def test_a_slow_node_report_names_the_host_and_paints_its_ranks(
    browser: str, tmp_path: Path
) -> None:
    """The straggler family's slow node (ranks 0 and 2 on node0): the what-to-fix table names
    the host candidate, and the root-delay heat map's hottest cell is one of its ranks."""
    from tracecomm.synth import write_run
    from tracecomm.synth.family import member

    run = tmp_path / "run"
    write_run(member("slow-node", 8).job, run)
    html = report_of(run, tmp_path / "node.html")
    doc = json.loads(runner.invoke(app, ["analyze", str(run), "-f", "json"]).stdout)
    with chromium_page() as page:
        assert open_report(page, html) == []
        fixes = page.evaluate(
            "[...document.querySelectorAll('#what-to-fix tr.flagged td:first-child')]"
            ".map(e => e.textContent)"
        )
        assert fixes == ["⚑ host node0"]
        hottest = max(doc["stragglers"]["delay_by_step"], key=lambda c: c["root_delay_ns"])
        assert hottest["rank"] in (0, 2)
        cell = (
            f"#stragglers rect.cell[data-rank='{hottest['rank']}'][data-step='{hottest['step']}']"
        )
        assert (
            page.evaluate(f"document.querySelector({json.dumps(cell)}).getAttribute('fill')")
            == "rgb(214,39,40)"
        )  # the top of the scale


def test_all_to_all_section_of_an_imbalanced_moe_run(browser: str, tmp_path: Path) -> None:
    """metrics.md §7a in the HTML: the JSON's figures, rank by rank."""
    from tracecomm.synth.moe import moe_run

    run = tmp_path / "run"
    write_run(moe_run(ranks=4, steps=3, layers=2, seed=4, metadata=True, imbalance=2.0), run)
    html = report_of(run, tmp_path / "moe.html")
    doc = json.loads(runner.invoke(app, ["analyze", str(run), "-f", "json"]).stdout)
    view = doc["all_to_all"]
    with chromium_page() as page:
        assert open_report(page, html) == []
        ids = page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)")
        assert ids == [*SECTIONS[:-1], "alltoall", SECTIONS[-1]]
        title = page.evaluate("document.querySelector('#alltoall h2').textContent")
        assert title == "All-to-all (expert parallel · NCCL)"
        rows = page.evaluate(
            "[...document.querySelectorAll('table.a2a tr[data-rank]')]"
            ".map(r => [...r.cells].map(c => c.textContent))"
        )
        assert [int(r[0]) for r in rows] == [r["rank"] for r in view["ranks"]]
        assert [r[2] for r in rows] == [f"{r['comm_ns'] / 1e6:.2f} ms" for r in view["ranks"]]
        assert [r[7] for r in rows] == [f"{r['received']:,}" for r in view["ranks"]]
        line = page.evaluate("document.querySelector('#alltoall .a2a-imbalance').textContent")
        imb = view["imbalance"]
        assert line.startswith(
            f"Token imbalance: rank {imb['busiest_rank']} receives {imb['ratio']:.2f}×"
        )


def test_alike_pipelines_fold_and_hosts_sort_naturally(browser: str, tmp_path: Path) -> None:
    """Issue 34: one pipeline table per distinct verdict (3 balanced replicas and one with a
    slow rank: two tables, 'N more pipelines like this'), hosts in the order a person reads."""
    from tracecomm.synth.pp import dp_pp_run

    run = tmp_path / "run"
    hosts = ["node10", "node2", "node1", "node10", "node2", "node1", "node10", "node2"]
    spec = dp_pp_run(dp=4, pp=2, microbatches=4, steps=2, slow_rank=5, slowdown=0.5, gzip=False)
    for path in write_run(spec, run):
        doc = json.loads(path.read_text())
        rank = doc["distributedInfo"]["rank"]
        text = path.read_text().replace('"host_name": "node0"', f'"host_name": "{hosts[rank]}"')
        path.write_text(text)
    html = report_of(run, tmp_path / "pp.html")
    with chromium_page() as page:
        assert open_report(page, html) == []
        assert count(page, "table.pipeline") == 2
        alike = page.evaluate(
            "[...document.querySelectorAll('p.alike')].map(p => [p.dataset.alike, p.textContent])"
        )
        assert len(alike) == 1 and alike[0][0] == "2"
        assert alike[0][1].startswith("2 more pipelines like this (")
        shown = page.evaluate(
            "[...document.querySelectorAll('#ranks .host text')].map(e => e.textContent)"
        )
        assert shown == ["node1", "node2", "node10"]


def test_report_export_writes_the_trace_beside_the_page_and_links_it(
    browser: str, tmp_path: Path
) -> None:
    """Issue 34: `report --export` writes PAGE.trace.json.gz next to the page, the page links
    it with how to open it in Perfetto, and the trace reads back as the export does."""
    page_path = tmp_path / "out" / "sample.html"
    page_path.parent.mkdir()
    report_of(SAMPLE_RUN, page_path, "--export", "--export-ranks", "0,3")
    trace = tmp_path / "out" / "sample.trace.json.gz"
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    assert sorted(r["rank"] for r in doc["tracecomm"]["ranks"]) == [0, 3]
    with chromium_page() as page:
        assert open_report(page, page_path) == []
        link = page.evaluate(
            "[document.querySelector('#trace a.trace-file').getAttribute('href'),"
            " document.querySelector('#trace a.trace-file').textContent]"
        )
        assert link == ["./sample.trace.json.gz", "sample.trace.json.gz"]
        assert "ui.perfetto.dev" in page.evaluate("document.querySelector('#trace').textContent")
    # without --export: no trace, no section; the selection flags alone are a usage error
    plain = report_of(SAMPLE_RUN, tmp_path / "plain.html")
    assert 'id="tracecomm-trace"' not in plain.read_text()
    result = runner.invoke(
        app, ["report", str(SAMPLE_RUN), "-o", str(tmp_path / "x.html"), "--export-ranks", "0"]
    )
    assert result.exit_code == 2 and "--export" in result.stderr


def test_the_slowest_instances_table(browser: str, tmp_path: Path) -> None:
    """Issue 34: the slowest collective instances (which call, who came last, wait vs
    transfer) as the JSON has them, slowest first."""
    html = report_of(SAMPLE_RUN, tmp_path / "sample.html")
    doc = json.loads(runner.invoke(app, ["analyze", str(SAMPLE_RUN), "-f", "json"]).stdout)
    slowest = doc["stragglers"]["slowest_instances"]
    assert len(slowest) == 10
    spans = [i["arrival_skew_ns"] + i["transfer_ns"] for i in slowest]
    assert spans == sorted(spans, reverse=True)
    assert all(i["last_rank"] == 3 for i in slowest)  # the sample's slow rank
    with chromium_page() as page:
        assert open_report(page, html) == []
        keys = page.evaluate(
            "[...document.querySelectorAll('table.slowest tr[data-key]')].map(r => r.dataset.key)"
        )
        assert keys == [i["key"] for i in slowest]


def test_a_cpu_timeline_is_cpu_busy_and_mfu_says_it_waits_for_a_peak(
    browser: str, tmp_path: Path
) -> None:
    """The gloo run: no device work, no device named; the FLOPs given, no peak known."""
    html = report_of(
        REPO / "fixtures" / "gloo-run", tmp_path / "gloo.html", "--model-flops-per-step", "1e9"
    )
    with chromium_page() as page:
        assert open_report(page, html) == []
        cards = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('.card')].map(c => "
            "[c.querySelector('.label').textContent, c.querySelector('.note').textContent]))"
        )
        assert "GPU busy" not in cards and cards["CPU busy"].startswith("CPU ops")
        assert (
            cards["MFU"] == "the model's FLOPs are known; the device's peak is not (--peak-tflops)"
        )


def test_the_inferred_wait_and_both_readings_in_the_report(browser: str, tmp_path: Path) -> None:
    """ByteDance's slow-worker job (issue 45): the what-to-fix section names the wait the trace
    does not record and gives the other reading of the idle, from the same figures as JSON."""
    from tests.conftest import SHARED_TRACES

    run = SHARED_TRACES / "bytedance-straggler-AR"
    if not run.is_dir():
        pytest.skip("../shared/data/traces/bytedance-straggler-AR is not present")
    html = report_of(run, tmp_path / "ar.html")
    with chromium_page() as page:
        assert open_report(page, html) == []
        waits = page.evaluate(
            "[...document.querySelectorAll('p.inferred-wait')].map(e => e.textContent)"
        )
        reading = page.evaluate("document.querySelector('p.idle-reading').textContent")
    assert waits[0].startswith(
        "Hidden wait: ranks 52, 56, 60 wait for the send/recv 48→32 before the AllReduce ×2 in "
        "40 of 40 steps"
    )
    assert reading.startswith("Idle that nothing explains, read as a wait instead of work: 49.5")
    assert "the idle of rank 48 (" in reading and reading.endswith(" decides.")
