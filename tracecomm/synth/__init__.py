"""Ground-truth trace generator: schedules, Kineto JSON and Nsight Systems SQLite writers and the
figures they imply."""

from __future__ import annotations

from tracecomm.synth.dlrm import dlrm_run
from tracecomm.synth.dptp import dp_tp_groups, dp_tp_run
from tracecomm.synth.expected import (
    ExpectedInstance,
    ExpectedTokens,
    Figures,
    RankExpected,
    expected_alltoall_ns,
    expected_figures,
    expected_instances,
    expected_run,
    expected_tokens,
)
from tracecomm.synth.fsdp import fsdp_run, fsdp_run_of_size
from tracecomm.synth.moe import moe_run
from tracecomm.synth.nsys import write_nsys_run
from tracecomm.synth.pp import dp_pp_groups, dp_pp_run
from tracecomm.synth.schedule import (
    CollType,
    Naming,
    Op,
    OpKind,
    ProcessGroup,
    RankSpec,
    RunSpec,
    Step,
    TimeFormat,
)
from tracecomm.synth.writer import render_rank, write_run

__all__ = [
    "CollType",
    "ExpectedInstance",
    "ExpectedTokens",
    "Figures",
    "Naming",
    "Op",
    "OpKind",
    "ProcessGroup",
    "RankExpected",
    "RankSpec",
    "RunSpec",
    "Step",
    "TimeFormat",
    "dlrm_run",
    "dp_pp_groups",
    "dp_pp_run",
    "dp_tp_groups",
    "dp_tp_run",
    "expected_alltoall_ns",
    "expected_figures",
    "expected_instances",
    "expected_run",
    "expected_tokens",
    "fsdp_run",
    "fsdp_run_of_size",
    "moe_run",
    "render_rank",
    "write_nsys_run",
    "write_run",
]
