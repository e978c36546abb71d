"""The rules of each reproduced HTA release, and small traces that tell the releases apart.

The unit tests pin the rules as read from each release's source; the live tests run the installed
HTA on the same small traces and require the figures of its --compat mode, so the rules are
checked against HTA itself, rule by rule (CI: HTA 0.6.1; the 0.5.0 venv runs them for 0.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from msgspec import structs

from tests.compat.live import need_hta
from tests.conftest import kernel, launch, step, trace_doc, write_trace
from tracecomm.compat import crosscheck
from tracecomm.compat.hta import HtaFigures, _kind, figures_of_files
from tracecomm.compat.rules import HTA_0_5, HTA_0_6, mode_for_release, rules

# name → (kind under 0.5.0, kind under 0.6.1)
KINDS = {
    "ncclKernel_AllReduce_RING_LL_Sum_float": ("comm", "comm"),
    "ncclDevKernel_AllGather_RING_LL": ("comm", "comm"),
    "ncclFooBar": ("compute", "comm"),
    "my_ncclKernel_wrapper": ("compute", "comm"),
    "hipKernelFoo": ("compute", "comm"),
    "hcclAllReduce": ("compute", "comm"),
    "Stream Wait Event": ("compute", "other"),
    "Stream Sync": ("other", "other"),
    "hipMemcpyAsync": ("other", "comm"),  # 0.6: ^hip (communication) is tried first
    "Memcpy HtoD (Pageable -> Device)": ("memory", "memory"),
    "Memset (Device)": ("memory", "memory"),
    "dma_copy": ("memory", "memory"),
    "cudaLaunchKernelExC_on_a_stream": ("compute", "other"),
    "runFunction_x": ("compute", "other"),
    "job_exe_1": ("compute", "other"),
    "packet_x": ("compute", "other"),
    "pe_exe_x": ("compute", "other"),
    "cpum_exe_subgraph_x": ("compute", "other"),
    "collective_subgraph_execution_x": ("compute", "other"),
    "fooSync": ("other", "other"),
    "sgemm_kernel": ("compute", "compute"),
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_kernel_kinds_per_release(name: str) -> None:
    assert (_kind(name, HTA_0_5), _kind(name, HTA_0_6)) == KINDS[name]


def test_modes_and_releases() -> None:
    assert rules("hta") is rules("hta-0.6") is HTA_0_6 and rules("hta-0.5") is HTA_0_5
    assert mode_for_release("0.6.1") == ("hta", None)
    assert mode_for_release("0.6.0") == ("hta", None)  # the same code as 0.6.1
    assert mode_for_release("0.5.0") == ("hta-0.5", None)
    mode, note = mode_for_release("0.7.0")
    assert mode == "hta" and note and "0.7.0" in note
    assert mode_for_release("0.2.0")[0] == "hta-0.5"
    with pytest.raises(ValueError, match="unknown HTA compat mode"):
        rules("hta-0.4")


# ---- small traces that tell 0.5 and 0.6 apart ------------------------------------------------


def _launched(name: str, ts: float, dur: float, corr: int, stream: Any = 7, **kw: Any) -> list:
    """A kernel and its launch 50 µs before it."""
    k = kernel(name, ts, dur, corr, stream)
    k.update(kw)
    return [k, launch(ts - 50, corr)]


def _names_case() -> dict[int, dict]:
    """One rank, three steps: every name of KINDS on a stream, fractional µs, overlaps."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 1000)]
    times = {
        "sgemm_kernel": (100.3, 200.2, 7),
        "ncclKernel_AllReduce_RING_LL_Sum_float": (150.6, 300.1, 13),
        "ncclDevKernel_AllGather_RING_LL": (500, 100, 13),
        "ncclFooBar": (520.4, 50, 7),
        "my_ncclKernel_wrapper": (620.5, 40, 7),
        "hipKernelFoo": (700, 30, 7),
        "hcclAllReduce": (740, 30, 13),
        "Stream Wait Event": (690.2, 7.5, 7),
        "hipMemcpyAsync": (820, 10, 7),
        "Memset (Device)": (840, 5, 7),
        "cudaLaunchKernelExC_on_a_stream": (850, 5, 7),
        "runFunction_x": (860, 5, 7),
        "job_exe_1": (870, 5, 7),
        "packet_x": (880, 5, 13),
        "pe_exe_x": (890, 5, 7),
        "cpum_exe_subgraph_x": (895, 5, 13),
        "collective_subgraph_execution_x": (902, 5, 7),
        "fooSync": (920, 5, 7),
        "dma_copy": (930, 5, 7),
    }
    for corr, (name, (ts, dur, stream)) in enumerate(times.items(), start=1):
        cat = {"Stream Wait Event": "cuda_sync", "fooSync": "cuda_sync"}.get(name, "kernel")
        events += _launched(name, ts, dur, corr, stream, cat=cat)
    events += _launched("sgemm_kernel", 1100, 400, 100)
    events += _launched("ncclKernel_AllReduce_RING_LL_Sum_float", 1300, 500, 101, 13)
    events += _launched("sgemm_kernel", 2100, 100, 102)  # the last step: dropped by both
    return {0: trace_doc(events, rank=0, world=1)}


def _step_names_case() -> dict[int, dict]:
    """ "ProfilerStep #2" (a space): a step name to 0.5, not to 0.6 (which then sees one step
    and filters nothing)."""
    events = [step(1, 0, 1000), {**step(2, 1000, 1000), "name": "ProfilerStep #2"}]
    events += _launched("sgemm_kernel", 100, 300, 1)
    events += _launched("ncclKernel_AllReduce_RING_LL_Sum_float", 200, 300, 2, 13)
    events += _launched("sgemm_kernel", 1100, 300, 3)
    return {0: trace_doc(events, rank=0, world=1)}


def _stream_values_case() -> dict[int, dict]:
    """Stream "7.5" (text): −1 to 0.5 (so not a GPU event), 7 to 0.6; "13" and 9.5 alike."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 1000)]
    events += _launched("sgemm_kernel", 100, 300, 1, "7.5")
    events += _launched("ncclKernel_AllReduce_RING_LL_Sum_float", 200, 300, 2, "13")
    events += _launched("sgemm_kernel", 600, 100, 3, 9.5)
    events += _launched("sgemm_kernel", 1100, 300, 4)
    return {0: trace_doc(events, rank=0, world=1)}


def _no_cpu_events_case() -> dict[int, dict]:
    """Rank 1 has kernels but no CPU event: 0.6 keeps all of it, 0.5 keeps nothing (and HTA
    0.5 then raises in get_temporal_breakdown)."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 1000)]
    events += _launched("sgemm_kernel", 100, 300, 1)
    events += _launched("ncclKernel_AllReduce_RING_LL_Sum_float", 200, 300, 2, 13)
    events += _launched("sgemm_kernel", 1100, 300, 3)
    bare = [
        kernel("sgemm_kernel", 150, 200, 11),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 250, 400, 12, 13),
        kernel("sgemm_kernel", 2500, 100, 13),
    ]
    return {0: trace_doc(events, rank=0, world=2), 1: trace_doc(bare, rank=1, world=2)}


def _mtia_case() -> dict[int, dict]:
    """An MTIA device (backend mtia:hccl), two steps: 0.6 keeps the CPU events inside the steps
    (the last one too), the kernels they launched and the memory kernels inside a step, whose
    stream −1 becomes their tid; 0.5 drops the last step and has no stream for them."""

    def rt(ts: float, corr: int) -> dict:
        return {
            **launch(ts, corr, "runFunction - job_prep_and_submit_for_execution"),
            "cat": "mtia_runtime",
        }

    def mtia_kernel(name: str, ts: float, dur: float, corr: int, stream: int = 1) -> dict:
        return {**kernel(name, ts, dur, corr, stream), "cat": "mtia_ccp_events"}

    events = [step(1, 0, 1000), step(2, 1000, 1000)]
    events += [rt(50, 1), mtia_kernel("mtia_fwd", 100, 300, 1)]
    events += [rt(150, 2), mtia_kernel("mtia_allreduce_hccl", 200, 300, 2, 2)]
    events += [rt(1050, 3), mtia_kernel("mtia_bwd", 1100, 300, 3)]
    events += [rt(2050, 4), mtia_kernel("mtia_fwd", 2100, 100, 4)]  # launched after the steps
    dma = {**kernel("dma_xfer", 1500, 50, None, -1), "cat": "mtia_ccp_events", "tid": 12}
    events.append(dma)
    doc = trace_doc(events, rank=0, world=1)
    doc["distributedInfo"]["backend"] = "mtia:hccl,cpu:gloo"
    return {0: doc}


CASES = {
    "names": _names_case,
    "step-names": _step_names_case,
    "stream-values": _stream_values_case,
    "no-cpu-events": _no_cpu_events_case,
    "mtia": _mtia_case,
}


def _write(tmp_path: Path, case: str) -> tuple[Path, dict[int, str]]:
    folder = tmp_path / case
    paths = {
        rank: str(write_trace(folder / f"rank{rank}.pt.trace.json", doc))
        for rank, doc in CASES[case]().items()
    }
    return folder, paths


def _figures(paths: dict[int, str], mode: str) -> dict[int, HtaFigures]:
    return {f.rank: f for f in figures_of_files(paths, mode)}


def test_the_releases_differ_on_each_case(tmp_path: Path) -> None:
    """Each case exists because 0.5 and 0.6 give different figures on it."""
    for case in CASES:
        _, paths = _write(tmp_path, case)
        old, new = _figures(paths, "hta-0.5"), _figures(paths, "hta")
        strip = [{**structs.asdict(f), "hta_version": ""} for f in old.values()]
        assert strip != [{**structs.asdict(f), "hta_version": ""} for f in new.values()], case
        assert {f.hta_version for f in old.values()} == {"0.5.0"}
        assert {f.hta_version for f in new.values()} == {"0.6.1"}


def test_what_each_release_keeps(tmp_path: Path) -> None:
    _, paths = _write(tmp_path, "step-names")
    assert _figures(paths, "hta-0.5")[0].kernel_time_us == 400  # step 1 only
    assert _figures(paths, "hta")[0].kernel_time_us == 1300  # everything
    _, paths = _write(tmp_path, "no-cpu-events")
    assert _figures(paths, "hta-0.5")[1].kernel_time_us == 0  # nothing kept (HTA raises)
    assert _figures(paths, "hta")[1].kernel_time_us == 2450  # 150 .. 2600, all kept
    _, paths = _write(tmp_path, "mtia")
    assert _figures(paths, "hta-0.5")[0].kernel_time_us == 400  # step 1, no dma (stream −1)
    mtia = _figures(paths, "hta")[0]
    assert mtia.kernel_time_us == 1450  # 100 .. 1550: both steps and the dma, not the 2100 one
    assert mtia.idle_us == 1450 - 400 - 300 - 50


@pytest.mark.hta
@pytest.mark.parametrize("case", sorted(CASES))
def test_live_hta_gives_the_figures_of_its_mode(tmp_path: Path, case: str) -> None:
    version = need_hta()
    mode, _ = mode_for_release(version)
    folder, paths = _write(tmp_path, case)
    ours = _figures(paths, mode)
    if case == "no-cpu-events" and mode == "hta-0.5":
        with pytest.raises(crosscheck.HtaFailed, match=r"^HTA 0\.5\.0 failed on .*: IndexError"):
            crosscheck.run_hta(folder, version)
        return
    theirs = crosscheck.run_hta(folder, version)
    rows = crosscheck.compare(list(ours.values()), theirs)
    assert [r for r in rows if not r.agrees] == [], (case, version)
