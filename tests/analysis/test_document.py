"""The analyze document is the Report's own types (``analysis.report``), written by msgspec: every
document the suite can make converts into ``Report`` and back byte for byte (keys in
order, integers as integers), validates against the schema generated from the types, and
loads back through the one loader (``run.saved``); the schema files are what the types
generate."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import orjson
import pytest
from typer.testing import CliRunner

import tracecomm
from tests.analysis.report_documents import (
    GENERATED,
    NCCL_SPEC,
    SAMPLE,
    document_of,
    shared_folders,
)
from tests.conftest import REPO
from tracecomm.analysis.report import Report
from tracecomm.cli import EXIT_OK, app
from tracecomm.doc import SCHEMA_VERSION
from tracecomm.nccl.diagnose import NcclDocument
from tracecomm.run.saved import load_saved_report
from tracecomm.run.sniff import saved_kind
from tracecomm.schema import generated, stale
from tracecomm.synth.nccl_log import nccl_log
from tracecomm.text import json_safe

SCHEMAS = REPO / "tracecomm" / "schema"
REPORT_SCHEMA = json.loads((SCHEMAS / "report.schema.json").read_text())
NCCL_SCHEMA = json.loads((SCHEMAS / "nccl.schema.json").read_text())


def round_trip(doc: dict[str, Any], kind: type[msgspec.Struct]) -> None:
    """The document converts into ``kind`` and back to the same JSON text, and decodes from it."""
    text = orjson.dumps(doc)
    typed = msgspec.json.decode(text, type=kind)
    assert orjson.dumps(msgspec.to_builtins(typed, str_keys=True)) == text


def loads_back(doc: dict[str, Any], tmp: Path) -> None:
    """Saved as ``analyze --format json`` writes it, the one loader reads it (its figures make
    sense) and hands back the same document."""
    path = tmp / "saved.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    assert saved_kind(path) == "analyze"
    saved = load_saved_report(path)
    assert orjson.dumps(saved.builtins()) == orjson.dumps(doc)


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_every_generated_document_is_the_typed_document(name: str, tmp_path: Path) -> None:
    run, options = GENERATED[name](tmp_path)
    doc = document_of(run, options)
    round_trip(doc, Report)
    jsonschema.validate(doc, REPORT_SCHEMA)
    loads_back(doc, tmp_path)


@pytest.mark.parametrize("folder", shared_folders(), ids=lambda p: p.name)
def test_every_shared_trace_document_is_the_typed_document(folder: Path, tmp_path: Path) -> None:
    doc = document_of(folder, {})
    round_trip(doc, Report)
    jsonschema.validate(doc, REPORT_SCHEMA)
    loads_back(doc, tmp_path)


def test_the_nccl_document_is_typed_too(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(nccl_log(NCCL_SPEC))
    result = CliRunner().invoke(app, ["nccl", str(log), "-f", "json"])
    assert result.exit_code == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    assert doc["nccl"]["watchdog_timeouts"] and doc["nccl"]["diagnostics"]
    round_trip(doc, NcclDocument)
    jsonschema.validate(doc, NCCL_SCHEMA)
    typed = msgspec.json.decode(result.stdout_bytes, type=NcclDocument)
    again = orjson.dumps(msgspec.to_builtins(typed), option=orjson.OPT_INDENT_2) + b"\n"
    assert json_safe(again) == result.stdout_bytes


def test_the_schema_files_are_generated_from_the_types() -> None:
    assert stale() == [], "stale: run `python -m tracecomm.schema` and commit the result"
    assert set(generated()) == {"report.schema.json", "nccl.schema.json"}
    for schema in (REPORT_SCHEMA, NCCL_SCHEMA):
        jsonschema.Draft202012Validator.check_schema(schema)


def test_the_writer_and_the_types_share_the_schema_version() -> None:
    assert tracecomm.analyze(SAMPLE).schema_version == SCHEMA_VERSION
    assert REPORT_SCHEMA["$id"].endswith(f"report-{SCHEMA_VERSION}.json")


def test_stale_names_a_file_that_differs(tmp_path: Path) -> None:
    for name, text in generated().items():
        (tmp_path / name).write_text(text)
    assert stale(tmp_path) == []
    (tmp_path / "report.schema.json").write_text("{}\n")
    assert stale(tmp_path) == ["report.schema.json"]


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(orjson.dumps(document_of(SAMPLE, {})))
    return doc


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("ranks", 0, "window", "figures", "idle_ns"), -1),
        (("stragglers", "recoverable_pct"), 250.0),
        (("ranks", 0, "timeline"), "tpu"),
        (("summary", "ranks_analyzed"), 0),
        (("by_type", 0, "coll_type"), "AllReduceish"),
        (("tool", "name"), "hta"),
        (("ranks", 0, "surprise"), 1),
    ],
)
def test_the_types_and_the_schema_refuse_the_same_damage(
    sample: dict[str, Any], where: tuple[str | int, ...], value: object
) -> None:
    doc = copy.deepcopy(sample)
    target: Any = doc
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(doc, Report)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, REPORT_SCHEMA)


def test_the_documents_collective_types_are_the_engines() -> None:
    """The document's CollType literal is the classifier's list (a type checker needs the
    literal written out; this keeps the two one list)."""
    from typing import get_args

    from tracecomm.colltypes import CollType
    from tracecomm.engine.classify import COLL_TYPES

    assert get_args(CollType) == COLL_TYPES
