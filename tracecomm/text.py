"""Text every layer prints the same way: rank lists and numbers with their units.

The lowest floor of the house (standard library only): analysis writes messages with it, the
renderers format figures with it, and nothing in it knows a Report.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

import msgspec
import msgspec.structs

T = TypeVar("T")

DASH = "–"  # a figure that does not exist (never 0, which is a measurement)


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: object) -> list[object]:
    """rank2 before rank10, node2 before node10: the order a person reads."""
    return [int(tok) if tok.isdigit() else tok for tok in _DIGITS.split(str(text))]


def compact_ranges(numbers: Iterable[int]) -> str:
    """[1, 2, 3, 7, 9, 10] -> '1–3, 7, 9–10'."""
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(numbers):
        if run and n != run[-1] + 1:
            parts.append(_span(run))
            run = []
        run.append(n)
    if run:
        parts.append(_span(run))
    return ", ".join(parts)


def rank_list(ranks: Iterable[int], shown: int = 8) -> str:
    """All ranks when few, else the first ones, the last one and how many: '64, 66, 68, 70,
    72, 74, …, 126 (32 ranks)'. Rank ranges of consecutive ranks stay ranges."""
    ordered = sorted(ranks)
    ranges = compact_ranges(ordered)
    if len(ordered) <= shown or ranges.count(",") < shown:
        return ranges
    head = ", ".join(map(str, ordered[: shown - 2]))
    return f"{head}, …, {ordered[-1]} ({len(ordered)} ranks)"


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}{DASH}{run[-1]}"


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds with three decimals and thousands separators."""
    return DASH if ns is None else f"{ns / 1e6:,.3f}"


def pct(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def time_unit(largest_ns: float) -> tuple[str, float]:
    """The unit a column of durations reads best in, from its largest value: (name, ns per
    unit). Seconds from 10 s, milliseconds from 1 ms, microseconds below."""
    if largest_ns >= 10**10:
        return "s", 1e9
    if largest_ns >= 10**6:
        return "ms", 1e6
    return "µs", 1e3


def in_unit(ns: float | None, per: float) -> str:
    """A duration in the unit ``per`` (``time_unit``): three decimals, thousands separated."""
    return DASH if ns is None else f"{ns / per:,.3f}"


def duration(ns: float | None) -> str:
    """Seconds from 0.1 s up (four decimals), milliseconds below."""
    if ns is None:
        return DASH
    return f"{ns / 1e9:.4f} s" if ns >= 10**8 else f"{ns / 1e6:.3f} ms"


# --- text from an input, made safe for each output -------------------------------------------
# Host, file, kernel and group names, log lines: anything read from a trace, a log or a dump may
# carry control characters (ESC starts a terminal escape, CR rewrites a line, a newline splits
# a one-line message) or Unicode format characters that reorder or hide text. Each output gets
# them escaped by its own rules, always visibly (``\x1b``, ``\u202e``).

# C0 controls (tab included: it shifts columns), DEL, C1 controls, and the Unicode format
# characters that reorder or hide text (bidi embeddings / overrides / isolates, zero-width
# characters, the BOM, line / paragraph separators).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|#])")
_CSV_FORMULA = ("=", "+", "-", "@")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control and format character escaped visibly: safe in a terminal,
    on one line."""
    return _UNSAFE.sub(_escape, text)


_JSON_RAW = re.compile(r"[\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def json_safe(document: bytes) -> bytes:
    """A JSON text with the control and format characters a JSON encoder leaves raw (DEL, C1,
    bidi and zero-width characters) written as ``\\uXXXX`` escapes: the same strings, but
    nothing that reorders or hides text when the JSON is printed (``jq``, ``cat``)."""
    text = document.decode()
    if _JSON_RAW.search(text) is None:
        return document
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


def markdown_safe(text: str) -> str:
    """Visible, with Markdown's own characters escaped (a name cannot open a link, code span,
    HTML tag or table cell)."""
    return _MARKDOWN.sub(r"\\\1", visible(text))


def xml_safe(text: str) -> str:
    """Visible: XML 1.0 allows no C0 control but tab and line ends (ElementTree escapes the
    markup characters itself)."""
    return visible(text)


def csv_safe(text: str) -> str:
    """Visible, and never read as a formula by a spreadsheet (a leading = + - @ is quoted)."""
    safe = visible(text)
    return "'" + safe if safe.startswith(_CSV_FORMULA) else safe


def map_strings(value: T, fn: Callable[[str], str]) -> T:
    """``value`` with ``fn`` applied to every string inside it: dataclass fields, tuples, lists
    and dict keys and values, all the way down (other values, frames included, as they are)."""
    if isinstance(value, str):
        return fn(value)  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(map_strings(v, fn) for v in value)  # type: ignore[return-value]
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {map_strings(k, fn): map_strings(v, fn) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, msgspec.Struct):
        changes = {
            name: mapped
            for name in value.__struct_fields__
            if (mapped := map_strings(getattr(value, name), fn)) is not getattr(value, name)
        }
        return msgspec.structs.replace(value, **changes) if changes else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: mapped
            for f in dataclasses.fields(value)
            if f.init
            and (mapped := map_strings(getattr(value, f.name), fn)) is not getattr(value, f.name)
        }
        return dataclasses.replace(value, **changes) if changes else value
    return value
