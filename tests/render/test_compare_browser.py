"""The compare page (``tracecomm compare -f html``, metrics.md §18) in headless Chromium: it
loads offline with no console error, draws the table, the scaling plot, where the time went,
the changed collectives and the projection from the embedded document, and run labels (paths)
stay text. The screenshot is kept as a test artifact (test-artifacts/compare-scaling.png)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO
from tests.render.browser import Page, chromium_or_skip, chromium_page
from tracecomm.cli import EXIT_OK, app
from tracecomm.synth.series import scaling_series
from tracecomm.synth.writer import write_run

runner = CliRunner()
ARTIFACTS = REPO / "test-artifacts"
READY = "document.getElementById('report').dataset.ready === 'true'"
SECTIONS = [
    "headline",
    "runs",
    "scaling",
    "decomposition",
    "collectives",
    "kernels",
    "projection",
]
MODEL = ["--flops-per-token", "2e8", "--tokens-per-step", "1000000"]


@pytest.fixture(scope="module")
def browser() -> str:
    return chromium_or_skip()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("series")
    for n, spec in scaling_series((4, 8, 16), base_world=16).items():
        write_run(spec, out / f"n{n}")
    return [out / f"n{n}" for n in (4, 8, 16)]


def page_of(runs: list[Path], out: Path, *extra: str) -> tuple[Path, dict[str, Any]]:
    args = ["compare", *map(str, runs), "-q", *extra]
    result = runner.invoke(app, [*args, "-f", "html", "-o", str(out)])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(runner.invoke(app, [*args, "-f", "json"]).stdout)
    return out, doc


def opened(page: Page, path: Path) -> list[str]:
    load = page.open(path.resolve().as_uri(), READY)
    assert load.network_requests == [path.resolve().as_uri()]
    return load.console_errors


def test_the_scaling_page_draws_every_section(
    browser: str, folders: list[Path], tmp_path: Path
) -> None:
    html, doc = page_of(folders, tmp_path / "compare.html", *MODEL)
    with chromium_page() as page:
        assert opened(page, html) == []
        assert page.evaluate("[...document.querySelectorAll('section')].map(s => s.id)") == (
            SECTIONS
        )
        assert page.evaluate("document.querySelectorAll('section[data-empty]').length") == 0
        # the table: the step times as the JSON has them
        cells = page.evaluate(
            "[...document.querySelectorAll('#run-table tr[data-figure=step_time_ns] td')]"
            ".map(td => td.textContent)"
        )
        steps = [f"{r['step_time_ns'] / 1e6:.3f}" for r in doc["runs"]]
        assert [cells[1], cells[2], cells[4]] == steps
        # the scaling plot: tokens/s per GPU, one line per exposed collective type, MFU
        series = page.evaluate(
            "[...new Set([...document.querySelectorAll('#scaling circle.point')]"
            ".map(c => c.dataset.series))]"
        )
        assert series == ["tokens/s per GPU", "AllGather", "ReduceScatter", "AllReduce", "MFU"]
        worlds = page.evaluate(
            "[...document.querySelectorAll('#scaling circle[data-series=AllGather]')]"
            ".map(c => +c.dataset.world)"
        )
        assert worlds == [4, 8, 16]
        # where the time went: one bar chart per pair, and the table's rows
        assert page.evaluate("document.querySelectorAll('svg.delta-bars').length") == 2
        total = page.evaluate(
            "document.querySelector('#decomposition-table tr[data-part=delta_step_ns] "
            "td:nth-child(2)').textContent"
        )
        d = doc["pairs"][0]["decomposition"]["delta_step_ns"]
        assert total == ("+" if d > 0 else "−") + f"{abs(d) / 1e6:.3f}"
        assert page.evaluate("document.querySelectorAll('#collectives table').length") == 2
        # by kernel: each pair's ten largest changes, in the JSON's order, whole names kept
        for pair in doc["pairs"]:
            shown = page.evaluate(
                f"[...document.querySelectorAll('#kernels-{pair['run']} tr[data-kernel]')]"
                ".map(r => [r.dataset.kernel, r.dataset.status])"
            )
            changes = pair["kernels"]["changes"]
            assert changes and shown == [[k["name"], k["status"]] for k in changes[:10]]
        projected = page.evaluate(
            "[...document.querySelectorAll('#projection-table tr[data-world]')]"
            ".map(r => +r.dataset.world)"
        )
        assert projected == [8, 16]
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(ARTIFACTS / "compare-scaling.png")


def test_one_size_says_why_there_is_no_plot(
    browser: str, folders: list[Path], tmp_path: Path
) -> None:
    html, _ = page_of([folders[0], folders[0]], tmp_path / "same.html")
    with chromium_page() as page:
        assert opened(page, html) == []
        empty = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('section[data-empty]')]"
            ".map(s => [s.id, s.querySelector('.empty').textContent]))"
        )
        assert set(empty) == {"scaling", "projection"}
        assert "one world size" in empty["scaling"]


def test_run_labels_stay_text(browser: str, folders: list[Path], tmp_path: Path) -> None:
    odd = tmp_path / "<img src=x onerror=window.__pwned=1>"
    odd.mkdir()
    for path in folders[0].iterdir():
        (odd / path.name).write_bytes(path.read_bytes())
    html, _ = page_of([folders[1], odd], tmp_path / "odd.html")
    with chromium_page() as page:
        assert opened(page, html) == []
        assert page.evaluate("window.__pwned === undefined")
        assert page.evaluate("document.querySelectorAll('main img').length") == 0
        assert "<img src=x" in page.evaluate("document.body.textContent")
