"""What every Report must hold across its sections (docs/metrics.md, "Invariants").

Each figure is computed once, in the analysis, and every section that answers the same
question shows that figure: parts add up to their totals, shares are their figure over the
stated base and lie in 0–100 %, a finding costs what the step's parts say, a pipeline names the
stage the numbers show, and the run has one step time. ``violations(report)`` lists what a
report breaks, one line each; the tests run it over every real trace, fixture and generated
shape, and over deliberately broken reports (one per invariant). A violation is a bug to fix
in the analysis, never a figure to patch at run time: nothing calls this outside the tests and
``tracecomm`` debugging.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from tracecomm.analysis.document_checks import partition_problem
from tracecomm.analysis.findings import StepBasis, straggler_waits
from tracecomm.analysis.pipeline_view import heaviest_stage
from tracecomm.analysis.report import Report
from tracecomm.engine.model import WindowFigures

# Step parts are rounded to whole ns one by one: sums may differ by half a ns a term.
_ROUNDING_NS = 8
# Shares whose base is not "the whole": an excess over a median, an error of a replay, a
# tolerance. They may pass 100 % and are checked for sign only.
_UNBOUNDED_SHARES = ("excess_pct", "error_pct", "tolerance_pct", "vs_")

Check = Callable[[Report], list[str]]


def partitions_add_up(report: Report) -> list[str]:
    """metrics.md §3: every window (a rank's, each step's) is compute + exposed comm +
    exposed memory + idle exactly (a rank's mean step within rounding), nothing negative,
    overlapped comm within comm, idle causes adding up to idle; the summary's total is the sum
    of the ranks' windows."""
    out = []
    for rank in report.ranks:
        windows = [("window", rank.window)] + [(f"step {s.step}", s.window) for s in rank.steps]
        for name, window in windows:
            if window is None:
                continue
            problem = _window_problem(window)
            if problem:
                out.append(f"rank {rank.rank} {name}: {problem}")
        mean = rank.step_mean if rank.step_median is not None else None
        if mean is not None:
            parts = mean.compute_ns + mean.exposed_comm_ns + mean.exposed_memory_ns + mean.idle_ns
            if abs(parts - mean.window_ns) > _ROUNDING_NS:
                out.append(f"rank {rank.rank} mean step: parts {parts} ns != {mean.window_ns} ns")
    total = report.summary.total
    whole = [r.window for r in report.ranks if r.window is not None]
    if total is not None and whole:
        for name in ("window_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "idle_ns"):
            summed = sum(getattr(w.figures, name) for w in whole)
            if getattr(total, name) != summed:
                out.append(f"summary.total.{name} {getattr(total, name)} != Σ ranks {summed}")
    return out


def _window_problem(window: WindowFigures) -> str | None:
    f = window.figures
    causes = window.idle_by_cause
    found = partition_problem(f, None if causes is None else sum(causes.values()))
    if found:
        return found
    exposed_types = sum(t.exposed_comm_ns for t in window.by_type)
    if window.by_type and exposed_types < f.exposed_comm_ns:
        return f"exposed comm by type {exposed_types} ns < exposed comm {f.exposed_comm_ns} ns"
    if any(t.exposed_comm_ns > t.comm_ns or t.exposed_comm_ns < 0 for t in window.by_type):
        return "a type's exposed comm outside 0–its comm"
    return None


def types_add_up(report: Report) -> list[str]:
    """The run's types are the sums of the ranks' (``by_type``), and one step's types are its
    exposed comm plus the time two or more types are exposed at once (``step_parts``)."""
    out = []
    summed: dict[str, list[int]] = {}
    for rank in report.ranks:
        window = rank.window
        for t in window.by_type if window is not None else ():
            row = summed.setdefault(t.coll_type, [0, 0])
            row[0] += t.comm_ns
            row[1] += t.exposed_comm_ns
    for summary in report.by_type:
        comm, exposed = summed.get(summary.coll_type, [0, 0])
        if (summary.comm_ns, summary.exposed_comm_ns) != (comm, exposed):
            out.append(f"by_type {summary.coll_type}: comm / exposed != Σ ranks")
    parts = report.step_parts
    if parts is not None:
        by_type = sum(parts.exposed_comm_by_type_ns.values())
        want = parts.exposed_comm_ns + parts.types_overlap_ns
        if abs(by_type - want) > _ROUNDING_NS:
            out.append(
                f"step_parts: exposed comm by type {by_type} ns != exposed comm "
                f"{parts.exposed_comm_ns} + overlap of types "
                f"{parts.types_overlap_ns} ns"
            )
        if parts.types_overlap_ns < 0:
            out.append("step_parts: a negative overlap of types")
    return out


def step_parts_add_up(report: Report) -> list[str]:
    """One step's parts are the step: compute + exposed comm + exposed memory + idle."""
    parts = report.step_parts
    if parts is None:
        return []
    summed = parts.compute_ns + parts.exposed_comm_ns + parts.exposed_memory_ns + parts.idle_ns
    if abs(summed - parts.step_ns) > _ROUNDING_NS:
        return [f"step_parts: parts {summed} ns != step {parts.step_ns} ns"]
    return []


def shares_are_their_figures(report: Report) -> list[str]:
    """Each share shown beside a figure is that figure over its stated base: the step parts'
    and the findings' shares are of the step (clipped to 100 %), busy is 100 − idle."""
    parts = report.step_parts
    if parts is None:
        return []
    out = []
    pairs: list[tuple[str, int, float | None]] = [
        ("compute", parts.compute_ns, parts.compute_pct),
        ("exposed_comm", parts.exposed_comm_ns, parts.exposed_comm_pct),
        ("exposed_memory", parts.exposed_memory_ns, parts.exposed_memory_pct),
        ("idle", parts.idle_ns, parts.idle_pct),
        ("busy", parts.step_ns - parts.idle_ns, parts.busy_pct),
    ]
    pairs += [
        (f"exposed_comm_by_type.{t}", ns, parts.exposed_comm_by_type_pct.get(t))
        for t, ns in parts.exposed_comm_by_type_ns.items()
    ]
    pairs += [
        (f"comm_by_type.{t}", ns, parts.comm_by_type_pct.get(t))
        for t, ns in parts.comm_by_type_ns.items()
    ]
    pairs += [
        (f"finding {f.kind} {f.coll_type or f.stage or ''}".rstrip(), f.cost_ns, f.cost_pct)
        for f in report.findings
        if f.cost_ns is not None
    ]
    for name, ns, pct in pairs:
        want = min(100.0, 100.0 * ns / parts.step_ns) if parts.step_ns else None
        if pct is None or want is None or not math.isclose(pct, want, abs_tol=1e-6):
            out.append(f"{name}: {pct!r} % is not {ns} ns over the step ({parts.step_ns} ns)")
    return out


def shares_in_range(report: Report) -> list[str]:
    """No impossible number: every share (a field ending in ``_pct``) in 0–100 % or null
    (excesses and errors, whose base is not a whole, only not negative); MFU a fraction no
    larger than what the compute share allows unless a finding says the input is wrong."""
    out = []
    for path, value in _shares(report):
        name = path.rsplit(".", 1)[-1]
        low_only = any(part in name for part in _UNBOUNDED_SHARES)
        if not math.isfinite(value) or value < 0 or (not low_only and value > 100):
            out.append(f"{path} = {value!r} outside 0–100 %")
    th = report.throughput
    if th is not None and th.mfu is not None:
        # an MFU over 100 % or over the compute share is shown only as impossible, with the
        # finding that says the FLOPs input is wrong
        flagged = th.mfu_possible is False and any(
            f.kind == "impossible_mfu" for f in report.findings
        )
        over = th.mfu > 1 or any(g.compute_pct < 100 * th.mfu for g in th.gaps)
        if not math.isfinite(th.mfu) or th.mfu < 0 or (over and not flagged):
            out.append(f"throughput.mfu = {th.mfu!r} is over 100 % or the compute share")
    return out


def _shares(value: Any, path: str = "report") -> Iterator[tuple[str, float]]:
    """Every float or int named ``*_pct`` inside the report's typed sections (dataclasses,
    tuples, dicts: a dict of shares is named for its values)."""
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield from _named(getattr(value, name), f"{path}.{name}")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _named(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _shares(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _shares(item, f"{path}.{key}")


def _named(value: Any, path: str) -> Iterator[tuple[str, float]]:
    if path.endswith("_pct"):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            yield path, float(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    yield f"{path}[{key}]", float(item)
        return
    yield from _shares(value, path)


def findings_cost_their_parts(report: Report) -> list[str]:
    """A finding about a collective type costs the step parts' exposed time of that type,
    less the wait in it the flagged stragglers' fix frees (metrics.md §6: theirs)."""
    parts = report.step_parts
    out = []
    if parts is None:
        return [
            f"finding {f.coll_type} exposed without step parts"
            for f in report.findings
            if f.kind == "exposed_comm"
        ]
    freed = straggler_waits(report, StepBasis(parts.step_ns, parts.basis, parts.per_step))
    for f in report.findings:
        if f.kind != "exposed_comm" or f.coll_type is None:
            continue
        exposed = parts.exposed_comm_by_type_ns.get(f.coll_type)
        want = None if exposed is None else exposed - freed.take_kernel(f.coll_type, exposed)
        if f.cost_ns != want:
            taken = None if exposed is None or want is None else exposed - want
            out.append(
                f"finding {f.coll_type} exposed costs {f.cost_ns} ns, step parts {exposed} "
                f"less the straggler's {taken}"
            )
    return out


def findings_fit_the_step(report: Report) -> list[str]:
    """Lost time is counted once (metrics.md §14): the costed findings add up to no more than
    the step."""
    parts = report.step_parts
    costed = [f for f in report.findings if f.severity == "cost" and f.cost_ns is not None]
    total = sum(f.cost_ns or 0 for f in costed)
    if parts is None or total <= parts.step_ns + len(costed):
        return []
    names = ", ".join(f"{f.title} {f.cost_ns}" for f in costed)
    return [f"findings cost {total} ns of a {parts.step_ns} ns step: {names}"]


def stages_named_are_heaviest(report: Report) -> list[str]:
    """The stage a pipeline's verdict names is the stage that computes the most, and a stage
    finding names a stage some pipeline's verdict names."""
    out = []
    named = set()
    for view in report.pipelines:
        found = heaviest_stage(view.per_stage)
        if view.overloaded_stage is None:
            continue
        named.add(view.overloaded_stage)
        if found is None or found[0].stage != view.overloaded_stage:
            heaviest = None if found is None else found[0].stage
            out.append(
                f"pipeline {view.group}: overloaded stage {view.overloaded_stage}, the most "
                f"compute is stage {heaviest}"
            )
        if f"stage {view.overloaded_stage} " not in view.verdict:
            out.append(
                f"pipeline {view.group}: the verdict does not name stage {view.overloaded_stage}"
            )
    for f in report.findings:
        if f.kind == "stage_imbalance" and f.stage not in named:
            out.append(f"finding names stage {f.stage}; the pipelines name {sorted(named)}")
    return out


def one_step_time(report: Report) -> list[str]:
    """The run has one step time (metrics.md §8): the step parts, the findings and the gate
    take the throughput's (the comparison's record is tested where it is built)."""
    th, parts = report.throughput, report.step_parts
    if th is None or th.step_time_ns is None or parts is None or not parts.per_step:
        return []
    if parts.step_ns != th.step_time_ns:
        return [f"step_parts.step_ns {parts.step_ns} != step time {th.step_time_ns}"]
    return []


def all_to_all_is_its_type(report: Report) -> list[str]:
    """The all_to_all section (metrics.md §7a) shows the AllToAll figures of §3, rank by rank
    and summed; each rank's matched time is its wait plus its transfer; the hidden share is its
    figure; the imbalance's gain is the straggler finding's cost where that finding names it."""
    view = report.all_to_all
    if view is None:
        return []
    out = []
    summary = next((t for t in report.by_type if t.coll_type == "AllToAll"), None)
    if summary is None or (view.comm_ns, view.exposed_ns) != (
        summary.comm_ns,
        summary.exposed_comm_ns,
    ):
        out.append("all_to_all: comm / exposed != by_type AllToAll")
    windows = {r.rank: r.window for r in report.ranks}
    for row in view.ranks:
        window = windows.get(row.rank)
        mine = next(
            (t for t in (window.by_type if window else ()) if t.coll_type == "AllToAll"), None
        )
        if mine is None or (row.comm_ns, row.exposed_ns) != (mine.comm_ns, mine.exposed_comm_ns):
            out.append(f"all_to_all rank {row.rank}: comm / exposed != its window's AllToAll")
        if row.matched_ns is not None and row.matched_ns != (row.wait_ns or 0) + (
            row.transfer_ns or 0
        ):
            out.append(f"all_to_all rank {row.rank}: wait + transfer != matched")
        if (
            row.hidden_pct is not None
            and row.comm_ns
            and not math.isclose(
                row.hidden_pct, 100 * (row.comm_ns - row.exposed_ns) / row.comm_ns, abs_tol=1e-9
            )
        ):
            out.append(f"all_to_all rank {row.rank}: hidden_pct is not (comm − exposed) / comm")
    imb = view.imbalance
    for f in report.findings:
        named = f.kind == "straggler" and "token imbalance" in f.title and imb is not None
        if named and imb and (imb.gain_ns, imb.gain_pct) != (f.cost_ns, f.recoverable_pct):
            out.append("all_to_all: balancing's gain != the token-imbalance finding's cost")
    return out


def kernels_fit_their_steps(report: Report) -> list[str]:
    """metrics.md §15: in the kernel table, each step's exposed kernel time (the kernels' shares
    of the partition, §3) is no more than the busy time of that step's window (its kernels
    run inside it; unlinked work there is not in the table), within a ns a name."""
    table = report.kernel_steps
    rank = next((r for r in report.ranks if table and r.rank == table.rank), None)
    if table is None or rank is None:
        return []
    windows = {s.step: s.window for s in rank.steps}
    out = []
    for i, step in enumerate(table.steps):
        window = windows.get(step)
        known = [k.exposed_ns[i] for k in table.kernels if k.exposed_ns is not None]
        if window is None or not known:
            continue
        busy = window.figures.window_ns - window.figures.idle_ns
        if sum(known) > busy + len(known):
            out.append(f"step {step}: kernels exposed {sum(known)} ns of a {busy} ns busy window")
    return out


CHECKS: dict[str, Check] = {
    "partitions add up": partitions_add_up,
    "types add up": types_add_up,
    "step parts add up": step_parts_add_up,
    "shares are their figures": shares_are_their_figures,
    "shares in range": shares_in_range,
    "findings cost their parts": findings_cost_their_parts,
    "findings fit the step": findings_fit_the_step,
    "stages named are heaviest": stages_named_are_heaviest,
    "one step time": one_step_time,
    "all-to-all is its type": all_to_all_is_its_type,
    "kernels fit their steps": kernels_fit_their_steps,
}


def violations(report: Report) -> list[str]:
    """Every invariant the report breaks, as ``<invariant>: <what>`` lines (empty: none)."""
    return [f"{name}: {line}" for name, check in CHECKS.items() for line in check(report)]
