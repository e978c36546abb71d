"""Every "metrics.md §N" the tool prints points at a section of a file the user has: the docs
shipped with the package (``tracecomm docs``), written for users in docs/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.conftest import REPO, SAMPLE_RUN
from tracecomm.cli import app
from tracecomm.cli.commands.docs import doc_path

REFERENCE = re.compile(r"([\w-]+\.md)((?:,? §\d+)*)")
SECTION = re.compile(r"^## (\d+)\.", re.MULTILINE)
SHIPPED = ("metrics.md", "architecture.md")


def printed_texts() -> dict[str, str]:
    """What a user sees: every --help, the terminal report with every section, the HTML page
    (its script's text included), and the JSON schemas' descriptions."""
    runner = CliRunner()
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    texts = {"--help": runner.invoke(app, ["--help"]).stdout}
    for name in commands:
        texts[f"{name} --help"] = runner.invoke(app, [name, "--help"]).stdout
    everything = ["--project", "--compat", "hta", "--model-flops-per-step", "3.2e15"]
    texts["analyze"] = runner.invoke(app, ["analyze", str(SAMPLE_RUN), *everything]).stdout
    for script in ("report.js", "compare.js"):
        texts[script] = (REPO / "tracecomm/render/assets" / script).read_text()
    for schema in sorted((REPO / "tracecomm/schema").glob("*.json")):
        texts[schema.name] = json.dumps(json.loads(schema.read_text()), ensure_ascii=False)
    return texts


def test_the_docs_are_where_the_tool_says() -> None:
    for name in SHIPPED:
        path = doc_path(name)
        assert path is not None and path.read_text().startswith("# ")
    result = CliRunner().invoke(app, ["docs", "--path"])
    assert result.exit_code == 0 and Path(result.stdout.strip()).name == "metrics.md"


@pytest.mark.parametrize(("where", "text"), sorted(printed_texts().items()))
def test_every_cited_section_exists(where: str, text: str) -> None:
    sections = {
        name: set(SECTION.findall((doc_path(name) or Path("/nonexistent")).read_text()))
        for name in SHIPPED
    }
    for match in REFERENCE.finditer(text):
        name, cited = match.group(1), re.findall(r"§(\d+)", match.group(2))
        if name == "README.md":
            continue
        assert name in SHIPPED, f"{where} cites {name}, which tracecomm does not ship"
        missing = [n for n in cited if n not in sections[name]]
        assert not missing, f"{where} cites {name} §{missing} (sections: {sorted(sections[name])})"


def test_the_cited_sections_are_the_ones_the_docs_define() -> None:
    """§N of docs/metrics.md keeps the specification's numbering (§1 classes … §11 the
    projection), so a citation means the same thing in both."""
    titles = dict(re.findall(r"^## (\d+)\. (.+)$", (REPO / "docs/metrics.md").read_text(), re.M))
    assert titles["1"].startswith("Events") and titles["6"] == "Stragglers"
    assert titles["7"] == "Bandwidth" and titles["11"].startswith("Scaling projection")


def test_the_layout_lists_every_package() -> None:
    """docs/architecture.md's Layout names every package."""
    text = (REPO / "docs" / "architecture.md").read_text()
    layout = text[text.index("## Layout") :]
    block = layout[layout.index("```") : layout.index("```", layout.index("```") + 3)]
    packages = sorted(
        p.name
        for p in (REPO / "tracecomm").iterdir()
        if p.is_dir() and (any(p.glob("*.py")) or any(p.glob("*.json")) or any(p.glob("*.csv")))
    )
    missing = [p for p in packages if f"tracecomm/{p}" not in block]
    assert packages and not missing, missing
