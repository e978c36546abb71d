"""A real trace cut at 200 random offsets: every cut ends with a result or a clean error
(never a crash, never a hang), and a salvaged file says where it broke."""

from __future__ import annotations

import gzip
import random
import time
from pathlib import Path

import pytest

from tracecomm.engine import breakdown
from tracecomm.errors import TraceError
from tracecomm.ingest import load_rank

TRACE = (
    Path(__file__).resolve().parents[2].parent
    / "shared/data/traces/hta-trace_filter/sampled_rank-0.json.gz"
)


@pytest.mark.skipif(not TRACE.exists(), reason="../shared/data/traces is absent")
def test_two_hundred_random_cuts(tmp_path: Path) -> None:
    text = gzip.decompress(TRACE.read_bytes())
    rng = random.Random(20261129)
    outcomes = {"salvaged": 0, "error": 0}
    for i in range(200):
        cut = rng.randrange(1, len(text))
        path = tmp_path / f"cut{i}.json"
        path.write_bytes(text[:cut])
        started = time.perf_counter()
        try:
            events = load_rank(path)
            breakdown(events)
            outcomes["salvaged"] += 1
            assert any(f"breaks off at byte {cut:,}" in w for w in events.warnings), cut
        except TraceError as exc:  # a clean, one-line error naming the file
            outcomes["error"] += 1
            assert str(path) in str(exc) and "\n" not in str(exc)
        assert time.perf_counter() - started < 5, f"cut at {cut} took too long"
        path.unlink()
    assert outcomes["salvaged"] > 150  # a cut past the header keeps the events before it
