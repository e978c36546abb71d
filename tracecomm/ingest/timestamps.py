"""Kineto ``ts``/``dur`` values (µs as JSON numbers) to exact integer nanoseconds.

The decoder hands fractional numbers over as their literal text and integers as ints, so no
value ever passes through float64 (19-digit epoch µs with a ns fraction do not fit in one).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

import polars as pl

_NS_PER_US = 1000
_MAX_WHOLE_US = (2**63 - 1) // _NS_PER_US - 1


def us_text_to_ns(values: Sequence[object], name: str) -> pl.Series:
    """Convert µs values (int, or decimal text such as ``"5077185321273.005"``) to Int64 ns.

    Fractions beyond the ns digit are rounded half away from zero. Values that are neither a
    number nor numeric text become null.
    """
    try:
        text = pl.Series(name, values, dtype=pl.String)
    except (TypeError, pl.exceptions.PolarsError):
        # integer µs (older traces, or mixed with decimal text in rewritten ones)
        text = pl.Series(name, [None if v is None else str(v) for v in values], dtype=pl.String)
    frame = pl.DataFrame({"t": text})
    if frame.select(_three_decimals(pl.col("t"))).item():
        # Kineto's own format since 2024: dropping the point gives the ns directly.
        return (
            frame.select(pl.col("t").str.replace(".", "", literal=True).cast(pl.Int64))
            .to_series()
            .alias(name)
        )
    out = frame.select(_ns_expr(pl.col("t")).alias(name)).to_series()
    exotic = frame.select(pl.col("t").str.contains(r"[eE]").fill_null(False)).to_series()
    if exotic.any():
        out = _patch_exponents(out, text, exotic)
    return out


def _three_decimals(col: pl.Expr) -> pl.Expr:
    """Every value is plain decimal text with exactly three fractional digits."""
    frac_ok = (col.str.len_bytes() - col.str.find(".", literal=True)).eq(4).fill_null(False)
    plain = ~col.str.contains(r"[eE+ ]").fill_null(False)
    return (col.is_null() | (frac_ok & plain)).all()


def _ns_expr(col: pl.Expr) -> pl.Expr:
    body = col.str.strip_chars().str.strip_prefix("-").str.strip_prefix("+")
    negative = col.str.strip_chars().str.starts_with("-")
    parts = body.str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("")
    frac_ns = frac.str.slice(0, 3).str.pad_end(3, "0").cast(pl.Int64, strict=False)
    round_up = (frac.str.slice(3, 1).cast(pl.Int64, strict=False).fill_null(0) >= 5).cast(pl.Int64)
    magnitude = whole * _NS_PER_US + frac_ns + round_up
    # Beyond int64 ns (year 2262, or ns written where µs belong): null, reported as dropped.
    in_range = whole.abs() < _MAX_WHOLE_US
    signed = pl.when(negative).then(-magnitude).otherwise(magnitude)
    return pl.when(in_range).then(signed)


def _patch_exponents(out: pl.Series, text: pl.Series, exotic: pl.Series) -> pl.Series:
    # Exponent notation only appears in rewritten traces, rarely: exact Decimal per value.
    values = out.to_list()
    for i in exotic.arg_true().to_list():
        values[i] = _decimal_us_to_ns(text[i])
    return pl.Series(out.name, values, dtype=pl.Int64)


def _decimal_us_to_ns(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        ns = int((Decimal(text) * _NS_PER_US).to_integral_value(rounding="ROUND_HALF_UP"))
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return ns if -(2**63) <= ns < 2**63 else None
