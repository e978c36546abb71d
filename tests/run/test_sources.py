"""Inputs addressed by URL: file:// and fsspec filesystems (here fsspec's in-memory one, which
a test can fill; s3:// and gs:// go through the same calls with s3fs / gcsfs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import SAMPLE_RUN, analyze_json
from tracecomm.cli import EXIT_PARTIAL, EXIT_USAGE, app
from tracecomm.errors import UsageError
from tracecomm.run.sources import find_sources, local_path, scheme

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def memory_run() -> Iterator[str]:
    """The sample run uploaded to fsspec's memory filesystem, plus a file that is not a trace
    and a hidden folder that must be left alone."""
    fs = fsspec.filesystem("memory")
    root = "/bucket/run"
    for path in sorted(SAMPLE_RUN.glob("*.json.gz")):
        fs.pipe(f"{root}/{path.name}", path.read_bytes())
    fs.pipe(f"{root}/notes.txt", b"not a trace")
    fs.pipe(f"{root}/.hidden/rank9.json", b"{}")
    yield f"memory://{root}"
    fs.rm(root, recursive=True)


def test_scheme_and_local_paths() -> None:
    assert scheme("s3://b/k") == "s3" and scheme("/tmp/x") is None and scheme("C:\\x") is None
    assert local_path("file:///tmp/a%20b") == Path("/tmp/a b")
    assert local_path("file://localhost/tmp/x") == Path("/tmp/x")
    assert local_path("gs://b/k") is None
    with pytest.raises(UsageError, match="file:// URLs name no host"):
        local_path("file://otherhost/tmp/x")


def test_a_file_url_is_the_folder_itself() -> None:
    by_url = analyze_json(SAMPLE_RUN.resolve().as_uri(), "-q", "-j", "1")
    by_path = analyze_json(str(SAMPLE_RUN.resolve()), "-q", "-j", "1")
    assert {k: v for k, v in by_url.items() if k != "inputs"} == {
        k: v for k, v in by_path.items() if k != "inputs"
    }


def test_a_remote_folder_is_listed_and_read_like_a_local_one(memory_run: str) -> None:
    urls = [f"{memory_run}/rank{r}.pt.trace.json.gz" for r in range(8)]
    assert find_sources([memory_run]) == urls
    remote = analyze_json(memory_run, "-q", "-j", "1")
    local = analyze_json(str(SAMPLE_RUN), "-q", "-j", "1")
    assert [r["path"] for r in remote["ranks"]] == find_sources([memory_run])  # the URLs
    strip = ("inputs", "ranks", "warnings")
    assert {k: v for k, v in remote.items() if k not in strip} == {
        k: v for k, v in local.items() if k not in strip
    }
    for mine, theirs in zip(remote["ranks"], local["ranks"], strict=True):
        assert {k: v for k, v in mine.items() if k != "path"} == {
            k: v for k, v in theirs.items() if k != "path"
        }


def test_a_broken_remote_file_names_its_url(memory_run: str) -> None:
    fs = fsspec.filesystem("memory")
    url = f"{memory_run}/rank3.pt.trace.json.gz"
    fs.pipe(url.removeprefix("memory://"), b"\x1f\x8b garbage")
    result = CliRunner().invoke(app, ["analyze", memory_run, "-f", "json", "-j", "1"])
    assert result.exit_code == EXIT_PARTIAL
    assert f"{url}: corrupt gzip data" in result.stderr
    assert "/tmp" not in result.stderr and "tracecomm-" not in result.stderr


def test_missing_remote_folders_and_unknown_protocols_are_usage_errors() -> None:
    for url, says in (
        ("memory:///no/such/run", "no such file or folder"),
        ("nosuchproto://b/run", "nosuchproto"),
    ):
        result = CliRunner().invoke(app, ["analyze", url])
        assert result.exit_code == EXIT_USAGE, result.stderr
        assert says in result.stderr and "Traceback" not in result.stderr


def test_a_file_url_folder_brings_its_settings(tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run with space"
    shutil.copytree(SAMPLE_RUN, run)
    (run / "tracecomm.toml").write_text("[model]\nflops-per-step = 32000000000000\n")
    by_url = analyze_json(run.as_uri(), "-q", "-j", "1")
    assert by_url["throughput"]["mfu"] is not None
    assert by_url["throughput"] == analyze_json(str(run), "-q", "-j", "1")["throughput"]
