"""Shared test helpers: tiny handwritten traces, the location of the real ones, and
``analyze_json`` (the CLI's JSON document of a run)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Literal, overload

import pytest
from typer.testing import CliRunner

from tracecomm.cli import EXIT_OK, app

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"
SAMPLE_RUN = REPO / "fixtures" / "sample-run"


def kernel(name: str, ts: Any, dur: Any, corr: int | None, stream: Any = 7, **args: Any) -> dict:
    ev_args = {"device": 0, "stream": stream, **args}
    if corr is not None:
        ev_args["correlation"] = corr
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": ev_args,
    }


def launch(ts: Any, corr: int, name: str = "cudaLaunchKernel", dur: Any = 2) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


def step(n: int, ts: Any, dur: Any) -> dict:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def trace_doc(
    events: list[dict], rank: int | None = 0, world: int | None = 2, **extra: Any
) -> dict:
    doc: dict[str, Any] = {"schemaVersion": 1}
    if rank is not None:
        info: dict[str, Any] = {"backend": "nccl", "rank": rank}
        if world is not None:
            info["world_size"] = world
        doc["distributedInfo"] = info
    doc.update(extra)
    doc["traceEvents"] = events
    return doc


def write_trace(
    path: Path, doc: dict | None = None, *, text: str | None = None, gz: bool = False
) -> Path:
    data = (text if text is not None else json.dumps(doc)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def simple_events(offset_us: int = 1000) -> list[dict]:
    """One step: compute 0–100 µs, an AllReduce 50–150 µs, idle 150–200, compute 200–250."""
    o = offset_us
    return [
        step(1, o - 10, 400),
        launch(o - 5, 1),
        launch(o - 4, 2),
        launch(o - 3, 3),
        kernel("sm90_gemm", o, 100, 1),
        kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            o + 50,
            100,
            2,
            stream=20,
        ),
        kernel("vectorized_elementwise_kernel", o + 200, 50, 3),
    ]


@overload
def analyze_json(
    *args: str | Path, code: int = EXIT_OK, with_stderr: Literal[False] = False
) -> dict[str, Any]: ...


@overload
def analyze_json(
    *args: str | Path, code: int = EXIT_OK, with_stderr: Literal[True]
) -> tuple[dict[str, Any], str]: ...


def analyze_json(
    *args: str | Path, code: int = EXIT_OK, with_stderr: bool = False
) -> dict[str, Any] | tuple[dict[str, Any], str]:
    """``tracecomm analyze ARGS -f json`` in this process: the document it printed, parsed,
    once the exit code is ``code``. ``args``: the inputs and any other options, as on the
    command line; ``with_stderr``: also what it printed to stderr (the warnings)."""
    result = CliRunner().invoke(app, ["analyze", *map(str, args), "-f", "json"])
    assert result.exit_code == code, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return (doc, result.stderr) if with_stderr else doc


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/data/traces is not present")
    return SHARED_TRACES


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--hostile-examples",
        type=int,
        default=None,
        help="examples per hostile-input property (CI runs a few dozen; e.g. 2000 for a long run)",
    )


def pytest_configure(config: pytest.Config) -> None:
    import os

    examples = config.getoption("--hostile-examples")
    if examples:
        os.environ["TRACECOMM_HOSTILE_EXAMPLES"] = str(examples)


# Llama-2 7B's Hugging Face config: the model the FLOP tests and the guide's --model-config use
LLAMA2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
