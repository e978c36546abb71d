"""Step windows (metrics.md §2): which device work each ProfilerStep launched, and whether
the step is complete."""

from __future__ import annotations

import polars as pl

from tracecomm.ingest.model import RankEvents

# Kernel launches (runtime, driver, HIP, graphs); a step whose launches of these have no
# recorded kernel was cut short by the end of the trace. Memcpy/memset calls are left out:
# real traces often hold cudaMemsetAsync calls that CUPTI records no activity for.
DEVICE_LAUNCH_PATTERN = r"(?i)launch.*kernel|kernel.*launch|graphlaunch"


def link_launches(device: pl.DataFrame, rank: RankEvents) -> pl.DataFrame:
    """Add ``launch_ns`` and ``launch_tid`` (the runtime call that launched the event) and
    ``step``."""
    launches = (
        rank.launches.filter(pl.col("correlation").is_not_null())
        .unique("correlation", keep="first")
        .select(
            "correlation", pl.col("start_ns").alias("launch_ns"), pl.col("tid").alias("launch_tid")
        )
    )
    linked = device.join(launches, on="correlation", how="left", maintain_order="left")
    return linked.with_columns(step_of(pl.col("launch_ns"), rank.steps, linked).alias("step"))


def step_of(times: pl.Expr, steps: pl.DataFrame, frame: pl.DataFrame) -> pl.Series:
    """The ProfilerStep whose CPU span holds each time (null when none does)."""
    probe = frame.select(times.alias("t")).with_row_index("_row")
    if steps.height == 0:
        return pl.Series("step", [None] * frame.height, dtype=pl.Int64)
    spans = steps.select("step", pl.col("start_ns").alias("s0"), pl.col("end_ns").alias("s1"))
    hit = (
        probe.filter(pl.col("t").is_not_null())
        .sort("t")
        .join_asof(spans.sort("s0"), left_on="t", right_on="s0", strategy="backward")
        .filter(pl.col("t") < pl.col("s1"))
        .select("_row", "step")
    )
    return probe.join(hit, on="_row", how="left").sort("_row")["step"]


def step_windows(linked: pl.DataFrame, rank: RankEvents) -> pl.DataFrame:
    """One row per ProfilerStep: its GPU window, event count, missing launches, completeness."""
    steps = rank.steps.unique("step", keep="first").sort("step")
    work = linked.filter((pl.col("cls") != "sync") & pl.col("step").is_not_null())
    windows = work.group_by("step").agg(
        pl.col("start_ns").min().alias("start_ns"),
        pl.col("end_ns").max().alias("end_ns"),
        pl.len().alias("events"),
    )
    missing = _missing_launches(linked, rank).group_by("step").agg(pl.len().alias("missing"))
    table = (
        steps.select(
            "step", pl.col("start_ns").alias("cpu_start_ns"), pl.col("end_ns").alias("cpu_end_ns")
        )
        .join(windows, on="step", how="left")
        .join(missing, on="step", how="left")
        .with_columns(pl.col("events").fill_null(0), pl.col("missing").fill_null(0))
    )
    reason = (
        pl.when(pl.col("cpu_end_ns") <= pl.col("cpu_start_ns"))
        .then(pl.lit("its ProfilerStep annotation never closed (no duration)"))
        .when(pl.col("events") == 0)
        .then(pl.lit("no device activity launched in the step"))
        .when(pl.col("missing") > 0)
        .then(pl.format("{} launched kernels missing from the trace", pl.col("missing")))
    )
    return table.with_columns(reason.alias("incomplete_reason")).with_columns(
        pl.col("incomplete_reason").is_null().alias("complete")
    )


def _missing_launches(linked: pl.DataFrame, rank: RankEvents) -> pl.DataFrame:
    recorded = linked.filter(pl.col("correlation").is_not_null()).select("correlation").unique()
    launches = rank.launches.filter(
        pl.col("name").str.contains(DEVICE_LAUNCH_PATTERN) & pl.col("correlation").is_not_null()
    )
    orphans = launches.join(recorded, on="correlation", how="anti")
    return orphans.with_columns(
        step_of(pl.col("start_ns"), rank.steps, orphans).alias("step")
    ).filter(pl.col("step").is_not_null())
