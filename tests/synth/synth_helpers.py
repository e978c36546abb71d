"""Helpers for the synth tests: tiny handmade specs and a reader for written files."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from tracecomm.synth.schedule import Op, OpKind

# An absolute origin in 2023 so handmade specs look like real clocks.
T0 = 1_700_000_000_000_000_000


def op(kind: OpKind, stream: int, start: int, end: int, launch: int, **kw: Any) -> Op:
    """An op from offsets relative to T0, written as [start, end) like on paper."""
    return Op(kind, stream, T0 + start, end - start, T0 + launch, **kw)


def load(path: Path) -> dict[str, Any]:
    """A written trace with floats kept as exact Decimals."""
    raw = path.read_bytes()
    text = gzip.decompress(raw).decode() if raw[:2] == b"\x1f\x8b" else raw.decode()
    doc: dict[str, Any] = json.loads(text, parse_float=Decimal)
    return doc


def to_ns(doc: dict[str, Any], value: Any) -> int:
    """A ts from a loaded file as absolute integer ns."""
    base = doc.get("baseTimeNanoseconds", 0)
    ns = Decimal(value) * 1000
    assert ns == ns.to_integral_value(), value
    return base + int(ns)
