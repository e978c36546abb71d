"""What the CI gate compares: per-rank medians over steps, from an ``analyze`` JSON document or
a compact baseline file (``tracecomm baseline``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tracecomm.analysis.document_checks import median_problem, mfu_problem, world_problem

if TYPE_CHECKING:
    from tracecomm.analysis.report import Report
    from tracecomm.engine.model import WindowFigures

BASELINE_KIND = "tracecomm-baseline"
BASELINE_VERSION = 2  # 2: the run's step time beside each rank's step window


class BaselineError(ValueError):
    """A baseline that cannot be read (the message names the file and the problem)."""


@dataclass(frozen=True)
class RankFigures:
    """One rank's medians over its included steps (ns, except ``overlap_pct``)."""

    step_window_ns: int  # the rank's median step window (not the step time: metrics.md §8)
    exposed_comm_ns: int
    idle_ns: int
    overlap_pct: float | None
    exposed_by_type_ns: dict[str, int]
    root_delay_ns: int  # straggler root delay per step (metrics.md §6), 0 without matching


@dataclass(frozen=True)
class RunFigures:
    step_time_ns: int | None  # the run's one step time (metrics.md §8), as analyze prints it
    ranks: dict[int, RankFigures]
    steps: tuple[int, ...]
    world_size: int | None
    mfu: float | None
    source: str  # where the figures came from, for messages
    tool_version: str | None = None
    notes: tuple[str, ...] = field(default=())
    # the model's FLOPs per token when the run was given them: a gate across models says so
    flops_per_token: int | None = None


def from_report(report: Report, source: str) -> RunFigures:
    """Figures of a Report: the run analyzed now, or its saved analyze document (read with
    ``run.saved.load_saved_report``, into the same Report)."""
    st = report.stragglers
    delays = {r.rank: r.root_delay_ns for r in st.ranks} if st is not None else {}
    ranks = {
        r.rank: RankFigures(
            step_window_ns=r.step_median.window_ns,
            exposed_comm_ns=r.step_median.exposed_comm_ns,
            idle_ns=r.step_median.idle_ns,
            overlap_pct=r.step_median.overlap_pct,
            exposed_by_type_ns=_type_medians(
                [s.window for s in r.steps if s.included and s.window is not None]
            ),
            root_delay_ns=max(0, delays.get(r.rank, 0)),
        )
        for r in report.ranks
        if r.step_median is not None
    }
    return RunFigures(
        step_time_ns=report.throughput.step_time_ns if report.throughput is not None else None,
        ranks=ranks,
        steps=report.summary.steps,
        world_size=report.summary.world_size,
        mfu=report.throughput.mfu if report.throughput is not None else None,
        source=source,
        tool_version=report.tool.version,
        flops_per_token=_per_token(report.throughput.flops if report.throughput else None),
    )


def _type_medians(windows: Sequence[WindowFigures]) -> dict[str, int]:
    """Median over the included steps' windows of each type's exposed time (0 in a step
    without it): of a Report's steps or of a saved document's."""
    types = sorted({t.coll_type for w in windows for t in w.by_type})
    return {
        coll: _median_ns(
            [sum(t.exposed_comm_ns for t in w.by_type if t.coll_type == coll) for w in windows]
        )
        for coll in types
    }


def _per_token(flops: Any) -> int | None:
    """A report's or a saved document's model FLOPs per token (None without them)."""
    if flops is None:
        return None
    value = getattr(flops, "per_token", None)
    step, tokens = getattr(flops, "per_step", None), getattr(flops, "tokens_per_step", None)
    if value is None and isinstance(step, int) and isinstance(tokens, int) and tokens > 0:
        value = round(step / tokens)  # --model-flops-per-step with --tokens-per-step
    return _per_token_value(value)


def _median_ns(values: Sequence[int]) -> int:
    return math.floor(statistics.median(values) + 0.5)


def baseline_document(figures: RunFigures) -> dict[str, Any]:
    """The compact, versioned baseline: figures only (a small file to commit)."""
    return {
        "kind": BASELINE_KIND,
        "schema_version": BASELINE_VERSION,
        "tool_version": figures.tool_version,
        "source": figures.source,
        "world_size": figures.world_size,
        "steps": list(figures.steps),
        "step_time_ns": figures.step_time_ns,
        "mfu": figures.mfu,
        "flops_per_token": figures.flops_per_token,
        "ranks": [
            {
                "rank": rank,
                "step_window_ns": f.step_window_ns,
                "exposed_comm_ns": f.exposed_comm_ns,
                "idle_ns": f.idle_ns,
                "overlap_pct": f.overlap_pct,
                "exposed_by_type_ns": f.exposed_by_type_ns,
                "root_delay_ns": f.root_delay_ns,
            }
            for rank, f in sorted(figures.ranks.items())
        ],
    }


def read_baseline_file(path: Path) -> RunFigures:
    """A compact baseline written by ``tracecomm baseline``. A whole analyze document is read by
    ``run.saved.load_saved_report`` (then ``from_report``)."""
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise BaselineError(f"{path}: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise BaselineError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("kind") != BASELINE_KIND:
        raise BaselineError(f"{path}: not a tracecomm baseline")
    return _from_baseline(doc, path)


def _checked(figures: RunFigures, path: Path) -> RunFigures:
    """A baseline's figures that can be: times whole and not negative, then the checks a saved
    analyze document's figures pass too (``analysis.document_checks``): each median step
    positive and holding its exposed communication and idle time, overlap in 0–100, MFU a
    fraction of the peak (a baseline holding an impossible figure would make the gate
    meaningless)."""
    for rank, f in figures.ranks.items():
        times = {
            "step_window_ns": f.step_window_ns,
            "exposed_comm_ns": f.exposed_comm_ns,
            "idle_ns": f.idle_ns,
            "root_delay_ns": f.root_delay_ns,
            **{f"exposed_by_type_ns.{t}": v for t, v in f.exposed_by_type_ns.items()},
        }
        for name, value in times.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BaselineError(f"{path}: rank {rank}: {name} {value!r} is not a time in ns")
        problem = median_problem(f.step_window_ns, f.exposed_comm_ns, f.idle_ns, f.overlap_pct)
        if problem:
            raise BaselineError(f"{path}: impossible figures: rank {rank}: {problem}")
    step = figures.step_time_ns
    if step is not None and (type(step) is not int or step <= 0):
        raise BaselineError(f"{path}: step_time_ns {step!r} is not a step time in ns")
    world = figures.world_size
    if world is not None and type(world) is not int:
        raise BaselineError(f"{path}: world_size {world!r} is not a rank count")
    problem = mfu_problem(figures.mfu) or world_problem(world)
    if problem:
        raise BaselineError(f"{path}: impossible figures: {problem}")
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in figures.steps):
        raise BaselineError(f"{path}: steps must be step numbers")
    return figures


def _from_baseline(doc: Mapping[str, Any], path: Path) -> RunFigures:
    version = doc.get("schema_version")
    # version 1 named each rank's median step window step_time_ns and held no step time
    window_key = "step_time_ns" if version == 1 else "step_window_ns"
    notes = (
        (
            "a version 1 baseline holds no step time (metrics.md §8): step_time is not compared, "
            "step_window is; write the baseline again with `tracecomm baseline`",
        )
        if version == 1
        else ()
    )
    if version not in (1, BASELINE_VERSION):
        newer = isinstance(version, int) and version > BASELINE_VERSION
        raise BaselineError(
            f"{path}: baseline schema version {version!r} "
            + (
                f"is newer than this tracecomm reads ({BASELINE_VERSION}): upgrade tracecomm"
                if newer
                else f"is not one this tracecomm reads ({BASELINE_VERSION}): write it again "
                "with `tracecomm baseline`"
            )
        )
    known = {"rank", window_key, "exposed_comm_ns", "idle_ns", "overlap_pct"}
    known |= {"exposed_by_type_ns", "root_delay_ns"}
    try:
        unknown = sorted({str(k) for r in doc["ranks"] for k in r} - known)
        if unknown:  # a misspelt or stale field would be read as absent
            raise ValueError(f"unknown rank field {unknown[0]!r}")
        ranks = {
            _rank_number(r["rank"]): RankFigures(
                step_window_ns=r[window_key],
                exposed_comm_ns=r["exposed_comm_ns"],
                idle_ns=r["idle_ns"],
                overlap_pct=r["overlap_pct"],
                exposed_by_type_ns={str(k): v for k, v in r["exposed_by_type_ns"].items()},
                root_delay_ns=r["root_delay_ns"],
            )
            for r in doc["ranks"]
        }
        steps = tuple(doc.get("steps") or ())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BaselineError(f"{path}: malformed baseline ({type(exc).__name__}: {exc})") from exc
    tool = doc.get("tool_version")
    return _checked(
        RunFigures(
            step_time_ns=doc.get("step_time_ns") if version != 1 else None,
            ranks=ranks,
            steps=steps,
            world_size=doc.get("world_size"),
            mfu=doc.get("mfu"),
            source=str(path),
            tool_version=tool if isinstance(tool, str) else None,
            notes=notes,
            flops_per_token=_per_token_value(doc.get("flops_per_token")),
        ),
        path,
    )


def _rank_number(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"rank {value!r} is not a rank number")
    return value


def _per_token_value(value: object) -> int | None:
    """A baseline's ``flops_per_token`` (absent in older baselines): a positive int, else none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
