"""s3:// inputs against a real S3 API: moto's server on loopback, read through s3fs, by this
process and by the workers of a Dask cluster (which get the endpoint and credentials from the
environment, as a real cluster's workers would).

Skipped without moto and s3fs unless ``TRACECOMM_REQUIRE_S3=1`` (set by `.ci/run`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SAMPLE_RUN
from tests.run.conftest import need, need_distributed
from tracecomm.analysis.report import report_document
from tracecomm.run.executors import DaskExecutor, ExecutorSpec, LocalExecutor
from tracecomm.run.request import request_of
from tracecomm.run.session import run_analysis as analyze

BUCKET = "traces"


def _need_s3() -> None:
    need(("flask", "moto.server", "s3fs"), "TRACECOMM_REQUIRE_S3", "moto, flask and s3fs are")


@pytest.fixture(scope="module")
def s3_run() -> Iterator[str]:
    """The sample run in a bucket of a moto S3 server; the endpoint and credentials are in the
    environment for the module's duration."""
    _need_s3()
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(BUCKET)
        for path in sorted(SAMPLE_RUN.glob("*.json.gz")):
            fs.pipe(f"{BUCKET}/job-42/{path.name}", path.read_bytes())
        yield f"s3://{BUCKET}/job-42/"
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def without_paths(doc: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items() if k not in ("inputs", "warnings")}
    out["ranks"] = [{k: v for k, v in r.items() if k != "path"} for r in doc["ranks"]]
    return out


@pytest.fixture(scope="module")
def local_doc() -> dict[str, Any]:
    return report_document(analyze(request_of(SAMPLE_RUN, jobs=1)))


def test_an_s3_folder_gives_the_local_figures(s3_run: str, local_doc: dict[str, Any]) -> None:
    doc = report_document(analyze(request_of(s3_run, jobs=1), executor=LocalExecutor()))
    assert without_paths(doc) == without_paths(local_doc)
    assert [r["path"] for r in doc["ranks"]] == [
        f"{s3_run}rank{r}.pt.trace.json.gz" for r in range(8)
    ]


def test_dask_workers_read_s3_themselves(
    s3_run: str, local_doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    need_distributed()
    from tracecomm.run import discover, sources, worker

    def not_here(*args: object) -> None:
        raise AssertionError("read on the client")

    with DaskExecutor(ExecutorSpec("dask"), workers=2) as executor:  # workers inherit the env
        monkeypatch.setattr(sources, "opened_locally", not_here)
        monkeypatch.setattr(worker, "opened_locally", not_here)
        monkeypatch.setattr(discover, "find_sources", not_here)
        doc = report_document(analyze(request_of(s3_run), executor=executor))
    assert without_paths(doc) == without_paths(local_doc)


def test_a_corrupt_object_is_one_missing_rank_named_by_its_url(s3_run: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    broken = f"{s3_run}rank9.pt.trace.json.gz"
    fs.pipe(broken.removeprefix("s3://"), b"\x1f\x8b\x08 not really gzip")
    try:
        report = analyze(request_of(s3_run, jobs=1))
    finally:
        fs.rm(broken.removeprefix("s3://"))
    assert len(report.ranks) == 8
    (missing,) = report.missing_ranks
    assert missing.path == broken and "gzip" in missing.reason
