"""Ground-truth trace generator: schedules, Kineto JSON writer and the figures they imply."""

from __future__ import annotations

from tracecomm.synth.dptp import dp_tp_groups, dp_tp_run
from tracecomm.synth.expected import (
    ExpectedInstance,
    Figures,
    RankExpected,
    expected_figures,
    expected_instances,
    expected_run,
)
from tracecomm.synth.fsdp import fsdp_run, fsdp_run_of_size
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
    "dp_pp_groups",
    "dp_pp_run",
    "dp_tp_groups",
    "dp_tp_run",
    "expected_figures",
    "expected_instances",
    "expected_run",
    "fsdp_run",
    "fsdp_run_of_size",
    "render_rank",
    "write_run",
]
