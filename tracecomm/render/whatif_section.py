"""The terminal's "what to fix" section (metrics.md §6, what-if by replay): which rank, stage,
replica or host to fix, what the step would become, and the op-type split of each gain."""

from __future__ import annotations

from rich.text import Text

from tracecomm.analysis.stragglers import Candidate, Replay, Stragglers, on_mean_step
from tracecomm.text import ms, pct, rank_list

MAX_CANDIDATES = 5
_OTHERS = {
    "peers": "its own work between waits at its peers' median, the waits recomputed",
    "scaled": "its own work scaled down to the target compute, the waits recomputed",
    "mixed": "own work at its peers' where they match, else scaled; the waits recomputed",
}
_STAGE = "every rank at the stage's median work, scaled to the other stages' median compute"


def whatif_section(st: Stragglers) -> Text | None:
    w = st.replay
    if w is None:
        return None
    text = Text("What to fix ", style="bold")
    text.append(f"(dependency replay of {w.shared_waits:,} shared waits)\n")
    text.append(f"  {_check(w)}\n")
    if not w.reproduces:
        return text.append(f"  {w.reason}\n")
    # the flagged, then the ones worth a look: a tenth of the flag line or more
    floor = (st.threshold_ns or 0) / 10
    shown = [c for c in st.candidates if c.flagged or (c.gain_ns > 0 and c.gain_ns >= floor)]
    shown = shown[:MAX_CANDIDATES]
    if not shown:
        return text.append("  no rank, stage, replica or host would shorten the step\n")
    if st.flagged and w.step_if_no_straggler_ns is not None:
        on_mean = on_mean_step(st)
        base = w.mean_step_ns if on_mean and w.mean_step_ns else w.measured_step_ns
        text.append(
            f"  fixing the flagged ({_names(st)}): the ranks' {'mean' if on_mean else 'median'} "
            f"step ≈ {ms(w.step_if_no_straggler_ns)} ms instead of "
            f"{ms(base)} ms ({pct(w.recoverable_pct)} % back)\n",
            style="bold",
        )
        if on_mean:
            text.append(
                "  (slow in some steps only: the median step, the step time, hides it; the "
                "mean over the steps shows it)\n"
            )
        text.append(_readings(w))
    else:
        text.append(
            "  nothing gains more than the flag line "
            f"({ms(st.threshold_ns)} ms: 5 % of the step, or 3× the median rank's gain)\n"
        )
    for c in shown:
        text.append(_candidate_line(c, w.measured_step_ns, _mostly(c)))
    return text


def _readings(w: Replay) -> str:
    """The hidden waits the replay took, and the other reading of the idle nothing explains
    (metrics.md §6)."""
    lines = [f"  hidden wait: {d.line}\n" for d in w.inferred_waits]
    if w.recoverable_pct_idle_as_wait is not None:
        decides = ", ".join(
            f"rank {d.rank} ({ms(d.idle_per_step_ns)} ms per step, {d.moves_pct:.1f} points)"
            for d in w.idle_decides
        )
        lines.append(
            f"  idle that nothing explains, read as a wait instead of work: "
            f"{pct(w.recoverable_pct_idle_as_wait)} % back"
            + (f"; the idle of {decides} decides" if decides else "")
            + "\n"
        )
    return "".join(lines)


def _mostly(c: Candidate) -> str:
    return f"; most of it is rank {c.mostly_rank}'s" if c.mostly_rank is not None else ""


def _check(w: Replay) -> str:
    verdict = "reproduces" if w.reproduces else "does not reproduce"
    return (
        f"replaying the recorded work gives {ms(w.step_ns)} ms for the ranks' median "
        f"step of {ms(w.measured_step_ns)} ms: {verdict} it ({w.reproduction_error_pct:.2f} % off, "
        f"tolerance {w.tolerance_pct:g} %)"
    )


def _names(st: Stragglers) -> str:
    flagged = [c for c in st.candidates if c.flagged]
    return ", ".join(_label(c) for c in flagged)


def _label(c: Candidate) -> str:
    if c.kind == "rank":
        return c.label
    return f"{c.label}: {_ranks(c.ranks)}"


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank{'s' * (len(ranks) > 1)} {rank_list(ranks)}"


def _candidate_line(c: Candidate, measured: int, mostly: str = "") -> str:
    mark = "⚑" if c.flagged else " "
    how = _STAGE if c.kind == "stage" else _OTHERS.get(c.method, c.method)
    line = (
        f"  {mark} {_label(c)}: {ms(measured)} → {ms(c.step_if_fixed_ns)} ms "
        f"({pct(c.recoverable_pct)} % back{mostly}) — {how}\n"
    )
    if c.by_op_type_pct:
        parts = ", ".join(f"{part} {pct(share)} %" for part, share in c.by_op_type_pct.items())
        line += f"      by op type (gain with only that part fixed): {parts}\n"
    return line
