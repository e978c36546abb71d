"""The outputs kept as golden files: what a refactor must leave byte-for-byte (JSON: value for
value) unchanged. ``python -m tests.golden.regen`` writes them again after a deliberate change
of behaviour; the commit that does so says why."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.conftest import REPO, SHARED_TRACES

SHARED = SHARED_TRACES.parents[1]
SHARED_LOGS = SHARED / "data" / "nccl-logs"
SHARED_NSYS = SHARED / "data" / "nsys"
DATA = Path(__file__).resolve().parent / "data"
SAMPLE = REPO / "fixtures" / "sample-run"
GLOO = REPO / "fixtures" / "gloo-run"


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    kind: str  # "json" (compared as values) or "text" (compared exactly)
    shared: bool = False  # reads ../shared (skipped when it is absent)

    @property
    def file(self) -> Path:
        return DATA / f"{self.name}.{'json' if self.kind == 'json' else 'txt'}"


def _shared_trace_cases() -> list[Case]:
    names = (
        sorted(p.name for p in SHARED_TRACES.iterdir() if p.is_dir())
        if SHARED_TRACES.is_dir()
        else []
    )
    return [
        Case(f"shared-{n}", ("analyze", str(SHARED_TRACES / n), "-f", "json"), "json", True)
        for n in names
    ]


def _shared_nsys_cases() -> list[Case]:
    """Each Nsight Systems export on its own: three different jobs (metrics.md §1b)."""
    names = sorted(p.name for p in SHARED_NSYS.glob("*.sqlite")) if SHARED_NSYS.is_dir() else []
    return [
        Case(f"nsys-{n}", ("analyze", str(SHARED_NSYS / n), "-f", "json"), "json", True)
        for n in names
    ]


def _shared_log_cases() -> list[Case]:
    names = sorted(p.name for p in SHARED_LOGS.glob("*.log")) if SHARED_LOGS.is_dir() else []
    return [
        Case(f"nccl-{n}", ("nccl", str(SHARED_LOGS / n), "-f", "json"), "json", True) for n in names
    ]


def cases() -> list[Case]:
    s = str(SAMPLE)
    return [
        Case("sample-json", ("analyze", s, "-f", "json"), "json"),
        Case(
            "sample-json-everything",
            (
                "analyze",
                s,
                "-f",
                "json",
                "--detail",
                "instances",
                "--detail",
                "timeline",
                "--project",
                "--compat",
                "hta",
                "--model-flops-per-step",
                "3.2e15",
            ),
            "json",
        ),
        Case("sample-csv", ("analyze", s, "-f", "csv"), "text"),
        Case("sample-terminal", ("analyze", s), "text"),
        Case(
            "sample-terminal-everything",
            ("analyze", s, "--project", "--compat", "hta", "--model-flops-per-step", "3.2e15"),
            "text",
        ),
        Case("sample-project-json", ("project", s, "-f", "json"), "json"),
        Case("gloo-json", ("analyze", str(GLOO), "-f", "json"), "json"),
        # metrics.md §18; the terminal's column widths follow the paths: JSON and Markdown only
        Case("compare-sample-gloo-json", ("compare", s, str(GLOO), "-f", "json"), "json"),
        Case("compare-sample-gloo-markdown", ("compare", s, str(GLOO), "-f", "markdown"), "text"),
        Case(
            "compare-shared-tbplugin-nccl-json",
            (
                "compare",
                str(SHARED_TRACES / "tbplugin-distributed_nccl"),
                str(SHARED_TRACES / "tbplugin-distributed_nccl_user_annotation_has_communication"),
                "-f",
                "json",
            ),
            "json",
            True,
        ),
        Case("gloo-terminal", ("analyze", str(GLOO)), "text"),
        *_shared_trace_cases(),
        *_shared_nsys_cases(),
        *_shared_log_cases(),
    ]


_VERSION = re.compile(r"tracecomm \d+\.\d+\.\d+\S*")


def run(case: Case) -> tuple[int, Any]:
    """The command's exit code and its output, with machine-specific paths and the tool's
    version replaced by placeholders."""
    result = CliRunner().invoke(
        __import__("tracecomm.cli", fromlist=["app"]).app, list(case.argv), env={"COLUMNS": "160"}
    )
    text = result.stdout.replace(str(SHARED), "<shared>").replace(str(REPO), "<repo>")
    if case.kind == "json":
        try:
            doc = json.loads(text)
        except ValueError:  # no document (a failing command): its output as it is
            return result.exit_code, {"not_json": text}
        if isinstance(doc.get("tool"), dict):
            doc["tool"].pop("version", None)
        doc.pop("tool_version", None)
        return result.exit_code, doc
    return result.exit_code, _VERSION.sub("tracecomm <version>", text)


def write(case: Case, code: int, output: Any) -> None:
    """Readable files, so that a diff shows a changed figure: JSON indented with sorted keys,
    text as it was printed under one ``exit <code>`` line."""
    case.file.parent.mkdir(parents=True, exist_ok=True)
    if case.kind == "json":
        payload = {"exit_code": code, "output": output}
        case.file.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    else:
        case.file.write_text(f"exit {code}\n{output}")


def read(case: Case) -> tuple[int, Any]:
    if case.kind == "json":
        payload = json.loads(case.file.read_text())
        return payload["exit_code"], payload["output"]
    head, _, text = case.file.read_text().partition("\n")
    return int(head.removeprefix("exit ")), text
