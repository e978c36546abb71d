"""HTA's releases as ``--compat`` names them, each release's definitions as its source has them
(``compat.hta`` reproduces the figures with them; its docstring tables the differences).
Polars-free: the CLI's ``--compat`` choices are this module's ``MODES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class HtaRules:
    """One HTA release's definitions, as its source has them."""

    release: str  # the release reproduced, e.g. "0.6.1"
    same_in: tuple[str, ...]  # every release with these definitions
    comm: re.Pattern[str]  # hta/common/types.py (0.6) or hta/utils/utils.py (0.5)
    memory: re.Pattern[str]
    not_compute: re.Pattern[str]
    profiler_step: re.Pattern[str]  # .search on every event name (and category)
    numeric_stream: bool  # 0.6: pd.to_numeric(stream, errors="coerce"); 0.5: int(stream)
    keep_all_without_cpu_events: bool  # 0.6: _filter_irrelevant_gpu_kernels returns the trace
    mtia_window: bool  # 0.6: filter_mtia_kernels_for_one_rank on MTIA devices


HTA_0_6 = HtaRules(
    release="0.6.1",
    same_in=("0.6.0", "0.6.1"),
    comm=re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)"),
    memory=re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)"),
    not_compute=re.compile(
        r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)"
        r"|(cuda.*LaunchKernel)|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)"
        r"|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)"
    ),
    profiler_step=re.compile(r"^ProfilerStep#(\d+)"),
    numeric_stream=True,
    keep_all_without_cpu_events=True,
    mtia_window=True,
)

HTA_0_5 = HtaRules(
    release="0.5.0",
    same_in=("0.5.0",),
    comm=re.compile(r"^nccl.*Kernel"),
    memory=re.compile(r"(^Memcpy)|(^Memset)|(^dma)"),
    not_compute=re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)"),
    profiler_step=re.compile("ProfilerStep"),
    numeric_stream=False,
    keep_all_without_cpu_events=False,
    mtia_window=False,
)

# --compat values: "hta" is HTA's current release
MODES: dict[str, HtaRules] = {"hta": HTA_0_6, "hta-0.6": HTA_0_6, "hta-0.5": HTA_0_5}


def rules(mode: str) -> HtaRules:
    """The rules of a --compat value (a key of ``MODES``)."""
    try:
        return MODES[mode]
    except KeyError:
        raise ValueError(f"unknown HTA compat mode {mode!r}: one of {', '.join(MODES)}") from None


def mode_for_release(version: str) -> tuple[str, str | None]:
    """The --compat value whose rules a given HTA release has, and a note when none has them
    exactly (a release this module does not know)."""
    for mode, r in MODES.items():
        if version in r.same_in:
            return mode, None
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:2]) or (0,)
    mode = "hta-0.5" if parts < (0, 6) else "hta"
    return mode, (
        f"HTA {version} is not a release tracecomm reproduces "
        f"({', '.join(sorted({v for r in MODES.values() for v in r.same_in}))}); "
        f"compared with --compat {mode} ({MODES[mode].release}'s definitions)"
    )
